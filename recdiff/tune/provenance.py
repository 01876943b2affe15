"""The provenance of the tune's preset: where and how it was tuned (device, code and library versions, model, timing,
the search's trials, the held-out measurement), recorded in the preset as ``sampler.preset``
(:class:`recdiff.params.Provenance`). The preset file itself is written and read by :mod:`recdiff.presets`.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from recdiff.params import Provenance
from recdiff.tune.plan import TunePlan

if TYPE_CHECKING:
    from recdiff.tune.choice import Measured


def slice_text(identity: dict[str, Any]) -> str:
    """A benchmark slice of an identity in one line: ``compose limit=200 offset=0 ...``."""
    b = identity.get("benchmark") or {}
    return " ".join([str(b.get("name")), *(f"{k}={v}" for k, v in sorted(b.items()) if k != "name")])


def provenance(tp: TunePlan, identity: dict[str, Any], holdout_identity: dict[str, Any], complete: int, total: int,
               held: Measured, result: str) -> Provenance:
    """Where and how the preset was tuned: device, code and library versions, model, timing, the search's trials
    (``complete`` of ``total`` counted) and the held-out measurement ``held`` (its timed problems × rounds)."""
    import torch

    from recdiff.trial.provenance import code_version

    version, commit = code_version()
    model, run = identity["model"], tp.search.run
    return Provenance(name=tp.preset_name(), device=tp.hardware().label, torch=str(torch.__version__),
                      version=version, commit=commit, model=str(model.get("path")), weights=model.get("weights"),
                      dtype=model.get("dtype"), timing_batch=tp.batch, speed_samples=run.speed_samples,
                      repeats=run.repeats, timing_threads=held.threads, benchmark=slice_text(identity),
                      trials_complete=complete, trials_total=total, held_out=slice_text(holdout_identity),
                      held_out_speed_samples=held.timed, held_out_repeats=held.rounds, study=tp.search.study.name,
                      date=datetime.date.today().isoformat(), result=result)
