"""The choice: the fastest feasible setting, ties broken towards the paper's defaults; whether it beats the defaults
on the held-out slice; the closing table. Plain functions over measured trials (no model, no storage).

A setting is a trial's parameters: its sampler's name under ``sampler`` (``diffusion`` where a trial recorded none,
as the tune's trials did before it searched LoopSpec) and that sampler's knobs. Every rule below holds across
samplers: a LoopSpec setting is feasible, fastest or tied by the same numbers as a diffusion one.

- **Feasible**: accuracy at or above the lower end of the reference's 95% interval on the same slice (static AR at
  r=32, ``run.reference``), so that the accuracy lies within the reference's interval or above it. The search records
  it as Optuna's constraint (``Trial.set_constraint``, :func:`constraint`: ≤ 0 is feasible).
- **Fastest**: the largest paired speed-up over the reference (each trial timed against it in the same rounds).
- **The knee**: the fastest feasible setting; every feasible setting whose speed-up lies within the fastest one's
  interval is tied with it (the fastest's measurement cannot tell them apart), and among the tied the one closest to
  the paper's defaults wins: fewest knobs changed, and among as many knobs changed the fastest. The sampler counts
  as a knob: a LoopSpec setting changes one more than the knobs it moves from LoopSpec's own defaults
  (:func:`changed`). Not "overlapping
  intervals": one trial timed under a passing load has an interval wide enough to overlap every other, and would
  win every tie by its noise.
- **The choice** (:func:`choose`): the knee of the settings other than the defaults, when it is faster than the
  defaults' own trial; it goes to the held-out slice beside them. A single noisy trial of the defaults (a wide
  interval that every setting reaches) so does not end the question before the held-out slice answers it.
- **A gain** (the patience's clock): a feasible setting faster than the best so far beyond its own interval.
- **The verdict**: the choice replaces the defaults only when, on the held-out slice, its accuracy stays feasible and
  its speed-up interval lies wholly above the defaults' interval: a last tie goes to the defaults.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from recdiff.trial.record import TrialRecord

Setting = Mapping[str, Any]


def setting_of(params: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's parameters as a setting: its sampler first (``diffusion`` where none is recorded), without the
    benchmark's name."""
    return {"sampler": params.get("sampler", "diffusion"),
            **{k: v for k, v in params.items() if k not in ("sampler", "benchmark")}}


@dataclass(frozen=True)
class Measured:
    """One trial's numbers: its paired speed-up over the reference and its accuracy, each with its 95% interval."""

    number: int
    params: dict[str, Any]                # the setting (:func:`setting_of`)
    speedup: float
    speedup_lo: float
    speedup_hi: float
    accuracy: float
    accuracy_lo: float
    accuracy_hi: float
    seconds: float | None = None          # how long the trial took
    timed: int | None = None              # timed calls per round (speed_samples: problems at batch 1)
    rounds: int | None = None             # rounds of paired timing
    threads: int | None = None            # torch threads while timing

    @classmethod
    def of(cls, trial: FrozenTrial) -> Measured | None:
        """A COMPLETE trial with a paired speed-up; None for any other."""
        a = TrialRecord.of(trial.user_attrs)   # of any version (a resumed tune's older trials)
        if trial.state != TrialState.COMPLETE or trial.values is None or a.speedup is None:
            return None
        return cls(trial.number, setting_of(trial.params), float(a.speedup), float(a.speedup_lo), float(a.speedup_hi),
                   float(trial.values[0]), float(a.accuracy_lo), float(a.accuracy_hi),
                   trial.duration.total_seconds() if trial.duration is not None else None,
                   a.speed_samples, a.timing_rounds, a.threads)

    def speed(self) -> str:
        return f"{self.speedup:.2f}x [{self.speedup_lo:.2f}, {self.speedup_hi:.2f}]"

    def acc(self) -> str:
        return f"{self.accuracy:.3f} [{self.accuracy_lo:.3f}, {self.accuracy_hi:.3f}]"


def constraint(accuracy: float, floor: float) -> float:
    """Optuna's constraint value of a trial (≤ 0: feasible): how far its accuracy lies below ``floor``, the lower end
    of the reference's interval."""
    return floor - accuracy


def feasible(m: Measured, floor: float) -> bool:
    return constraint(m.accuracy, floor) <= 0


def ties(m: Measured, fastest: Measured) -> bool:
    """Whether ``m``'s speed-up lies within the fastest one's interval: the fastest's measurement cannot tell them
    apart."""
    return m.speedup >= fastest.speedup_lo


def own_defaults(params: Setting, defaults: Sequence[Setting]) -> Setting:
    """The defaults of the setting's own sampler (``defaults``: each sampler's, the paper's first)."""
    return next((d for d in defaults if d["sampler"] == params.get("sampler", "diffusion")), {})


def changed(params: Setting, defaults: Sequence[Setting]) -> int:
    """How far a setting lies from the paper's defaults (``defaults``: each searched sampler's, the paper's first):
    the knobs it changes from its own sampler's defaults, and one for a sampler other than the paper's."""
    own = own_defaults(params, defaults)
    other = params.get("sampler", "diffusion") != defaults[0]["sampler"]
    return other + sum(key != "sampler" and key in own and value != own[key] for key, value in params.items())


def knee(trials: Sequence[Measured], floor: float, defaults: Sequence[Setting]) -> Measured | None:
    """The fastest feasible setting; among those tied with it, the one closest to the defaults (fewest knobs
    changed; among as many, the fastest). None when no trial is feasible."""
    ok = [m for m in trials if feasible(m, floor)]
    if not ok:
        return None
    fastest = max(ok, key=lambda m: (m.speedup, -m.number))
    return min((m for m in ok if ties(m, fastest)),
               key=lambda m: (changed(m.params, defaults), -m.speedup, m.number))


def choose(trials: Sequence[Measured], floor: float, defaults: Sequence[Setting]) -> Measured | None:
    """The setting to confirm beside the paper's defaults (``defaults[0]``): the knee of the feasible settings other
    than them, of either sampler; None when there is none, or when it is not faster than the defaults' own feasible
    trial."""
    paper = next((m for m in trials if m.params == dict(defaults[0])), None)
    best = knee([m for m in trials if m.params != dict(defaults[0])], floor, defaults)
    if best is None or (paper is not None and feasible(paper, floor) and best.speedup <= paper.speedup):
        return None
    return best


def runners_up(trials: Sequence[Measured], floor: float, shown: Sequence[Measured | None], k: int) -> list[Measured]:
    """The ``k`` fastest feasible settings after those ``shown`` already (the choice, the defaults)."""
    skip = {m.number for m in shown if m is not None}
    others = [m for m in trials if feasible(m, floor) and m.number not in skip]
    return sorted(others, key=lambda m: (-m.speedup, m.number))[:k]


def since_gain(counted: Sequence[Measured | None], floor: float) -> int:
    """Trials (in the order they ran; None for one without a speed-up: it failed) since the last gain: a feasible
    setting faster than the best before it beyond its own interval."""
    best: Measured | None = None
    since = 0
    for m in counted:
        if m is not None and feasible(m, floor) and (best is None or m.speedup_lo > best.speedup):
            best, since = m, 0
        else:
            since += 1
    return since


@dataclass(frozen=True)
class Verdict:
    keep: bool           # True: the chosen setting; False: the paper's defaults are kept
    reason: str


def judge(chosen: Measured, defaults: Measured, floor: float, is_defaults: bool) -> Verdict:
    """The choice against the paper's defaults, both measured on the held-out slice (``floor``: the lower end of the
    reference's accuracy interval there)."""
    if is_defaults:
        return Verdict(False, "no feasible setting of the search was faster than the paper's defaults: the defaults "
                              "are kept")
    if not feasible(chosen, floor):
        return Verdict(False, f"on the held-out slice the chosen setting's accuracy {chosen.accuracy:.3f} lies below "
                              f"the reference's interval (from {floor:.3f}): the defaults are kept")
    if chosen.speedup_lo <= defaults.speedup_hi:
        return Verdict(False, f"nothing beats the paper's defaults beyond the intervals on the held-out slice (chosen "
                              f"{chosen.speed()}, defaults {defaults.speed()}): the defaults are kept")
    return Verdict(True, f"the chosen setting beats the paper's defaults beyond the intervals on the held-out slice "
                         f"({chosen.speed()} against {defaults.speed()}), at an accuracy within the reference's "
                         "interval or above it")


def settings_text(params: Setting, defaults: Sequence[Setting]) -> str:
    """The knobs that differ from the setting's own sampler's defaults, ``key=value`` (floats to 3 significant
    digits), after ``sampler=<name>`` for a sampler other than the paper's (``defaults[0]``)."""
    def shown(v: Any) -> str:
        return "null" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v)
    own = own_defaults(params, defaults)
    sampler = params.get("sampler", "diffusion")
    moved = [f"{k}={shown(v)}" for k, v in params.items() if k != "sampler" and k in own and v != own[k]]
    head = [f"sampler={sampler}"] if sampler != defaults[0]["sampler"] else []
    return " ".join(head + moved) or "(the paper's defaults)"


@dataclass(frozen=True)
class Row:
    label: str
    slice: str            # held-out | searched
    measured: Measured
    settings: str


def table(rows: Sequence[Row], reference: str) -> str:
    """Aligned text: one row per setting, its paired speed-up over the reference and its accuracy, each with its 95%
    interval, and the knobs it changes."""
    head = ["setting", "trial", "slice", f"speed-up vs {reference} [95% CI]", "accuracy [95% CI]", "knobs changed"]
    body = [[r.label, str(r.measured.number), r.slice, r.measured.speed(), r.measured.acc(), r.settings]
            for r in rows]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    right = {1, 3, 4}
    return "\n".join("  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in
                               enumerate(zip(line, widths))).rstrip() for line in [head, *body])
