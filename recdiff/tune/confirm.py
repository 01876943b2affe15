"""The choice confirmed on the held-out slice (``<name>-holdout``): the reference, the paper's defaults, LoopSpec's
defaults (where it is searched) and the chosen setting, one after the other in this process, each paired against the
reference on ``tune.holdout_speed_samples`` timed problems (at least 8 by default) in ``tune.holdout_repeats`` rounds
(at least 5). Grid trials of their study: a configuration already COMPLETE there (a resumed tune, on this device: the
study's identity holds it) is not measured again.

The speed-up intervals of all but the reference are bootstrapped by problem (:func:`by_problem`): the verdict asks
whether the choice is faster on problems the search did not see, and a problem's rounds are not independent
draws of that question.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from optuna.trial import FrozenTrial

from recdiff.params import SamplerParams
from recdiff.timing import clustered_median_interval
from recdiff.tune.choice import Measured
from recdiff.tune.tuning import Say, measure_grid

if TYPE_CHECKING:
    from recdiff.tune.tuning import Tuning


def by_problem(m: Measured, trial: FrozenTrial, seed: int = 0) -> Measured:
    """``m`` with its speed-up's interval from a cluster bootstrap over the timed problems (each with its rounds,
    ``speedup_cells``). A trial recorded without the cells, or with one timed problem, keeps its recorded interval."""
    cells = trial.user_attrs.get("speedup_cells")
    if not cells or len(cells) < 2:
        return m
    point, lo, hi = clustered_median_interval(cells, seed=seed)
    return dataclasses.replace(m, speedup=point, speedup_lo=lo, speedup_hi=hi)


def confirm(t: Tuning, chosen: SamplerParams, say: Say) -> dict[str, Measured]:
    """``reference``, ``defaults`` (the paper's), ``loopspec`` (LoopSpec's defaults, where it is searched) and
    ``chosen`` (one of those measurements where the choice is one of them) measured on the held-out slice."""
    entries: list[tuple[str, SamplerParams]] = [("reference", t.tp.search.run.reference_sampler()),
                                                ("defaults", t.tp.defaults())]
    if t.tp.options.loopspec:
        entries.append(("loopspec", t.tp.loopspec()))
    entries.append(("chosen", chosen))
    out: dict[str, Measured] = {}
    for label, sampler in entries:
        plan = t.tp.holdout(sampler)
        trial = measure_grid(plan, t.holdout, t.load_holdout, t.tp.output_dir() / "holdout" / label,
                             t.holdout_identity)
        m = Measured.of(trial)
        assert m is not None   # measure_grid returns COMPLETE trials with a speed-up only
        # the reference's speed-up is 1 by definition: its accuracy is what counts there
        out[label] = m if label == "reference" else by_problem(m, trial, plan.run.seed)
        timed = f" ({m.timed} timed calls × {m.rounds} rounds)" if m.timed and m.rounds else ""
        say(f"held-out {label:9s} trial {m.number:3d} speed-up {out[label].speed()} accuracy {m.acc()}{timed} "
            f"| {t.budget.shown()}")
    return out
