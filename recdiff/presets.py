"""Tuned presets, read and written: ``conf/sampler/tuned/<name>.yaml`` (written by ``python -m recdiff.tune``), a
sampler's settings over its structured node (the diffusion sampler's or LoopSpec's, as the file's defaults list
names it: ``/sampler/<name>@sampler``), with their provenance (``sampler.preset``, :class:`recdiff.params.Provenance`)
and the timing batch they were tuned at (``run.timing_batch``).

- ``python sweep.py sampler=tuned/<name>`` composes it (settings and timing batch); run on another device, with other
  weights or timed at another batch than it was tuned, the job warns in one line naming the difference
  (:func:`mismatch`, called by ``recdiff/study/job.py``);
- ``recdiff.generate(model, prompts, **recdiff.load_preset(name))``: :func:`load_preset` gives the keyword arguments,
  the sampler's name among them (a :class:`RecdiffError` for an unknown knob), and with ``model=`` warns when the
  model or its device differ;
- ``python -m recdiff.tune`` writes one (:func:`write_preset`, the settings of :func:`settings` and the provenance that
  ``recdiff/tune/provenance.py`` gathers), never over an existing file without ``tune.overwrite=true``.

Below both the study package and the tune: either may import it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import warnings
from pathlib import Path
from typing import Any

from recdiff.device import Device, describe, parse_label
from recdiff.errors import RecdiffError
from recdiff.params import SAMPLER_PARAMS, Provenance, SamplerParams

PRESET_DIR = Path(__file__).resolve().parents[1] / "conf" / "sampler" / "tuned"   # `sweep.py sampler=tuned/<name>`


HEADER = """\
# @package _global_
# The {sampler} sampler tuned for {device}, model {model}, run.timing_batch={batch}: python -m recdiff.tune {command}
# (docs/tune.md). Use: python sweep.py sampler=tuned/{name} (timed at run.timing_batch={batch} unless given) ·
# recdiff.generate(model, prompts, **recdiff.load_preset("{name}")). sampler.preset records where it was tuned.
"""



class PresetWarning(UserWarning):
    """A preset used on another device, model or timing batch than it was tuned for."""


def mismatch(p: Provenance, device: Device | None, weights: str | None, timing_batch: int | None) -> str | None:
    """One line naming how this run differs from where the preset was tuned; None when it does not (unknown parts
    are not compared)."""
    diffs = []
    tuned = parse_label(p.device)
    if device is not None and tuned is not None and device.differs(tuned):
        diffs.append(f"device {device.label}, tuned on {p.device}")
    if p.weights and weights and weights != p.weights:
        diffs.append(f"model weights {weights}, tuned with {p.model} (weights {p.weights})")
    if timing_batch is not None and p.timing_batch is not None and timing_batch != p.timing_batch:
        diffs.append(f"run.timing_batch={timing_batch}, tuned at run.timing_batch={p.timing_batch}")
    if not diffs:
        return None
    return (f"preset {p.name or '?'} is used elsewhere than it was tuned: {'; '.join(diffs)}. Its speed-up may not "
            "carry over: python -m recdiff.tune finds this machine's (docs/tune.md)")


def preset_path(name_or_path: str | os.PathLike) -> Path:
    """A preset's file: a path to a ``.yaml`` file, or a name under ``conf/sampler/tuned``."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.is_file():
        path = p
    else:
        path = PRESET_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        known = sorted(f.stem for f in PRESET_DIR.glob("*.yaml"))
        raise RecdiffError(f"preset {name_or_path!r}: no file {path} (presets in {PRESET_DIR}: "
                           f"{', '.join(known) or 'none'})")
    return path


def sampler_node(raw: dict[str, Any]) -> dict[str, Any]:
    """The sampler's settings of a preset file: its ``sampler`` node (``# @package _global_``, beside
    ``run.timing_batch``), or the whole file (``# @package sampler``, as presets were written before)."""
    raw = {k: v for k, v in raw.items() if k != "defaults"}
    if not isinstance(raw.get("sampler"), dict):
        return raw
    other = sorted(set(raw) - {"sampler", "run"}) + [f"run.{k}" for k in (raw.get("run") or {}) if k != "timing_batch"]
    if other:
        raise RecdiffError(f"unknown config key {other[0]!r}: a preset holds sampler.* and run.timing_batch")
    return raw["sampler"]


def sampler_name(raw: dict[str, Any]) -> str:
    """The sampler whose node a preset file composes: ``/sampler/<name>@...`` in its defaults list (``diffusion``
    where it names none)."""
    for entry in raw.get("defaults") or []:
        found = re.fullmatch(r"/?sampler/([A-Za-z0-9_]+)(@.*)?", str(entry))
        if found:
            if found.group(1) not in SAMPLER_PARAMS:
                raise RecdiffError(f"defaults: {entry!r} names no sampler ({', '.join(SAMPLER_PARAMS)})")
            return found.group(1)
    return "diffusion"


def read_preset(name_or_path: str | os.PathLike) -> SamplerParams:
    """The preset's settings over its sampler's defaults (:func:`sampler_name`), checked as a sweep checks them (one
    :class:`RecdiffError` line naming the file), with its provenance in ``.preset``."""
    from omegaconf import OmegaConf

    from recdiff.errors import describe_error

    path = preset_path(name_or_path)
    try:
        raw = OmegaConf.to_container(OmegaConf.load(path))
        if not isinstance(raw, dict):
            raise RecdiffError("not a mapping of settings")
        node = OmegaConf.merge(OmegaConf.structured(SAMPLER_PARAMS[sampler_name(raw)]),
                               OmegaConf.create({"sampler": sampler_node(raw)}).sampler)
        params = OmegaConf.to_object(node)
    except Exception as exc:  # noqa: BLE001 — YAML, OmegaConf and the sampler's own checks: one line
        raise RecdiffError(f"preset {path}: {describe_error(exc)}") from None
    complaint = params.complaint()
    if complaint:
        raise RecdiffError(f"preset {path}: {complaint}")
    return params


def model_weights(model: Any) -> str | None:
    """The digest of a loaded model's weight files (as a study's identity records it); None when unknown."""
    from recdiff.checkpoint import resolve_checkpoint, weight_files
    from recdiff.digest import weights_digest

    try:
        return weights_digest(weight_files(resolve_checkpoint(model.source)))
    except (AttributeError, OSError, RecdiffError):
        return None


def load_preset(name_or_path: str | os.PathLike, model: Any = None) -> dict[str, Any]:
    """The keyword arguments of a tuned preset for :func:`recdiff.generate`: ``sampler`` (``diffusion`` or
    ``loopspec``) and its settings. With ``model`` (a loaded model), a :class:`PresetWarning` when the model or its
    device differ from where the preset was tuned. A preset naming a knob its sampler does not have is a
    :class:`RecdiffError`."""
    params = read_preset(name_or_path)
    where = getattr(params, "preset", None)
    if model is not None and where is not None:
        warning = mismatch(where, describe(str(model.device)), model_weights(model), None)
        if warning:
            warnings.warn(warning, PresetWarning, stacklevel=2)
    return {"sampler": params.name, **params.params()}


def settings(sampler: SamplerParams, searched: list[str]) -> dict[str, Any]:
    """What a preset states: every searched knob (null where unset: LoopSpec's ``r_draft2``), and the other settings
    where they differ from the sampler's defaults."""
    defaults = {f.name: f.default for f in sampler.declared()}
    given = sampler.params()
    values = {k: given.get(k) for k in defaults if k in given or k in searched}
    return {k: v for k, v in values.items() if k in searched or v != getattr(defaults[k], "value", defaults[k])}


def refuse_overwrite(path: Path) -> RecdiffError:
    """A preset file there already (``tune.overwrite``, ``tune.name``)."""
    return RecdiffError(f"preset {path} exists: tune.overwrite=true replaces it, tune.name=<name> writes another")


def write_preset(path: Path, values: dict[str, Any], provenance: Provenance, command: str,
                 overwrite: bool = False, sampler: str = "diffusion") -> Path:
    """The preset file of ``sampler``'s ``values``, written whole and then moved into place; an existing one only with
    ``overwrite`` (else one :class:`RecdiffError` line naming it, also when another process wrote it meanwhile)."""
    prov = {k: v for k, v in dataclasses.asdict(provenance).items() if k != "batch_size"}   # the old name: read only
    body = {"defaults": [f"/sampler/{sampler}@sampler", "_self_"], "sampler": {**values, "preset": prov},
            "run": {"timing_batch": provenance.timing_batch}}
    text = HEADER.format(sampler=sampler, device=provenance.device, model=provenance.model,
                         batch=provenance.timing_batch, command=command, name=provenance.name)
    import yaml

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
