"""Writing the tune's preset: ``conf/sampler/tuned/<name>.yaml``, the chosen knobs over their sampler's structured
node (``sampler/diffusion`` or ``sampler/loopspec``), the timing batch they were tuned at (``run.timing_batch``, so
that ``sweep.py sampler=tuned/<name>`` times what the preset claims) and where and how they were tuned
(``sampler.preset``, :class:`recdiff.params.Provenance`). An existing file is never replaced without
``tune.overwrite=true``.

Reading presets (``recdiff.load_preset``, the sweep's warning) is :mod:`recdiff.presets`, below the study package.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from recdiff.params import Provenance, SamplerParams
from recdiff.tune.plan import TunePlan, refuse_overwrite

if TYPE_CHECKING:
    from recdiff.tune.choice import Measured

HEADER = """\
# @package _global_
# The {sampler} sampler tuned for {device}, model {model}, run.timing_batch={batch}: python -m recdiff.tune {command}
# (docs/tune.md). Use: python sweep.py sampler=tuned/{name} (timed at run.timing_batch={batch} unless given) ·
# recdiff.generate(model, prompts, **recdiff.load_preset("{name}")). sampler.preset records where it was tuned.
"""


def settings(sampler: SamplerParams, searched: list[str]) -> dict[str, Any]:
    """What a preset states: every searched knob (null where unset: LoopSpec's ``r_draft2``), and the other settings
    where they differ from the sampler's defaults."""
    defaults = {f.name: f.default for f in sampler.declared()}
    given = sampler.params()
    values = {k: given.get(k) for k in defaults if k in given or k in searched}
    return {k: v for k, v in values.items() if k in searched or v != getattr(defaults[k], "value", defaults[k])}


def write_preset(path: Path, values: dict[str, Any], provenance: Provenance, command: str,
                 overwrite: bool = False, sampler: str = "diffusion") -> Path:
    """The preset file of ``sampler``'s ``values``, written whole and then moved into place; an existing one only with
    ``overwrite`` (else one :class:`RecdiffError` line naming it, also when another process wrote it meanwhile)."""
    prov = {k: v for k, v in dataclasses.asdict(provenance).items() if k != "batch_size"}   # the old name: read only
    body = {"defaults": [f"/sampler/{sampler}@sampler", "_self_"], "sampler": {**values, "preset": prov},
            "run": {"timing_batch": provenance.timing_batch}}
    text = HEADER.format(sampler=sampler, device=provenance.device, model=provenance.model,
                         batch=provenance.timing_batch, command=command, name=provenance.name)
    text += yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=120)
    if not overwrite and path.exists():
        raise refuse_overwrite(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    try:
        if overwrite:
            os.replace(tmp, path)
        else:   # a link fails where the name exists: no check-then-write race with another tune
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise refuse_overwrite(path) from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


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
