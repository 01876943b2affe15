"""The choice confirmed on the held-out slice (``<name>-holdout``): the reference, the paper's defaults and the chosen
setting, one after the other in this process, each paired against the reference in ``tune.holdout_repeats`` rounds
(default ``run.repeats``). Grid trials of their study: a configuration already COMPLETE there (a resumed tune) is not
measured again."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recdiff.params import DiffusionParams, SamplerParams
from recdiff.tune.choice import Measured
from recdiff.tune.study import Say, measure_grid

if TYPE_CHECKING:
    from recdiff.tune.study import Tuning


def confirm(t: Tuning, chosen: DiffusionParams, say: Say) -> dict[str, Measured]:
    """``reference``, ``defaults`` and ``chosen`` (the defaults' own measurement when the choice is the defaults)
    measured on the held-out slice."""
    entries: list[tuple[str, SamplerParams]] = [("reference", t.tp.search.run.reference_sampler()),
                                                ("defaults", t.tp.defaults()), ("chosen", chosen)]
    out: dict[str, Measured] = {}
    for label, sampler in entries:
        plan = t.tp.holdout(sampler)
        trial = measure_grid(plan, t.holdout, t.load_holdout, t.tp.output_dir() / "holdout" / label,
                             t.holdout_identity)
        m = Measured.of(trial)
        assert m is not None   # measure_grid returns COMPLETE trials with a speed-up only
        out[label] = m
        say(f"held-out {label:9s} trial {m.number:3d} speed-up {m.speed()} accuracy {m.acc()} "
            f"| {t.budget.shown()}")
    return out
