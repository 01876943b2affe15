"""Tuned presets: a sampler config, ``conf/sampler/tuned/<name>.yaml``, merged over the structured ``sampler/diffusion``
node, with its provenance (``sampler.preset``, :class:`recdiff.params.Provenance`):

- ``python sweep.py sampler=tuned/<name>`` composes it; a knob the diffusion sampler does not have fails in one line
  (exit 2); run on another device, model or batch than it was tuned for, the job warns in one line naming the
  difference (:func:`mismatch`, called by ``recdiff/study/job.py``);
- ``recdiff.generate(model, prompts, **recdiff.load_preset(name))``: :func:`load_preset` gives the keyword arguments
  (a :class:`RecdiffError` for an unknown knob), and with ``model=`` warns when the model or its device differ.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import warnings
from pathlib import Path
from typing import Any

import yaml

from recdiff.errors import RecdiffError
from recdiff.params import DiffusionParams, Provenance

PRESET_DIR = Path(__file__).resolve().parents[2] / "conf" / "sampler" / "tuned"
HEADER = """\
# @package sampler
# The diffusion sampler tuned for {device}, model {model}, batch {batch}: python -m recdiff.tune {command}
# (docs/tune.md). Use: python sweep.py sampler=tuned/{name} · recdiff.generate(model, prompts,
# **recdiff.load_preset("{name}")). sampler.preset records where it was tuned; no sampler reads it.
"""


class PresetWarning(UserWarning):
    """A preset used on another device, model or batch than it was tuned for."""


def cpu_name() -> str:
    """The processor's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_label(device: str) -> str:
    """The device as a preset records it: ``cpu (<processor>)`` or ``cuda (<GPU name>)``."""
    if str(device).startswith("cuda"):
        import torch

        return f"cuda ({torch.cuda.get_device_name(torch.device(device))})"
    return f"cpu ({cpu_name()})"


def mismatch(p: Provenance, device: str | None, weights: str | None, batch: int | None) -> str | None:
    """One line naming how this run differs from where the preset was tuned; None when it does not (unknown parts
    are not compared)."""
    diffs = []
    if p.device and device and device != p.device:
        diffs.append(f"device {device}, tuned on {p.device}")
    if p.weights and weights and weights != p.weights:
        diffs.append(f"model weights {weights}, tuned with {p.model} (weights {p.weights})")
    if batch is not None and batch != p.batch_size:
        diffs.append(f"batch {batch}, tuned at batch {p.batch_size}")
    if not diffs:
        return None
    return (f"preset {p.name or '?'} is used elsewhere than it was tuned: {'; '.join(diffs)}. Its speed-up may not "
            "carry over: python -m recdiff.tune finds this machine's (docs/tune.md)")


# ------------------------------------------------------------------------------------------------ writing
def settings(sampler: DiffusionParams, searched: list[str]) -> dict[str, Any]:
    """What a preset states: every searched knob, and the other settings where they differ from the defaults."""
    defaults = {f.name: f.default for f in DiffusionParams.declared()}
    values = sampler.params()
    return {k: v for k, v in values.items() if k in searched or v != getattr(defaults[k], "value", defaults[k])}


def write_preset(path: Path, values: dict[str, Any], provenance: Provenance, command: str) -> Path:
    """The preset file (written whole, then moved into place)."""
    body = {"defaults": ["/sampler/diffusion@_here_", "_self_"], **values,
            "preset": dataclasses.asdict(provenance)}
    text = HEADER.format(device=provenance.device, model=provenance.model, batch=provenance.batch_size,
                         command=command, name=provenance.name)
    text += yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=120)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def provenance(name: str, device: str, model: str, weights: str | None, dtype: str | None, batch: int,
               benchmark: str, held_out: str, study: str, result: str) -> Provenance:
    import torch

    return Provenance(name=name, device=device_label(device), torch=str(torch.__version__), model=model,
                      weights=weights, dtype=dtype, batch_size=batch, benchmark=benchmark, held_out=held_out,
                      study=study, date=datetime.date.today().isoformat(), result=result)


# ------------------------------------------------------------------------------------------------ reading
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


def read_preset(name_or_path: str | os.PathLike) -> DiffusionParams:
    """The preset's settings over the diffusion sampler's defaults, checked as a sweep checks them (one
    :class:`RecdiffError` line naming the file), with its provenance in ``.preset``."""
    from omegaconf import OmegaConf

    from recdiff.errors import describe_error

    path = preset_path(name_or_path)
    try:
        raw = OmegaConf.to_container(OmegaConf.load(path))
        if not isinstance(raw, dict):
            raise RecdiffError("not a mapping of settings")
        raw.pop("defaults", None)
        node = OmegaConf.merge(OmegaConf.structured(DiffusionParams), OmegaConf.create({"sampler": raw}).sampler)
        params = OmegaConf.to_object(node)
    except Exception as exc:  # noqa: BLE001 — YAML, OmegaConf and the sampler's own checks: one line
        raise RecdiffError(f"preset {path}: {describe_error(exc)}") from None
    complaint = params.complaint()
    if complaint:
        raise RecdiffError(f"preset {path}: {complaint}")
    return params


def model_weights(model: Any) -> str | None:
    """The digest of a loaded model's weight files (as a study's identity records it); None when unknown."""
    from recdiff.load import resolve_checkpoint, weight_files
    from recdiff.study.identity import weights_digest

    try:
        return weights_digest(weight_files(resolve_checkpoint(model.source)))
    except (AttributeError, OSError, RecdiffError):
        return None


def load_preset(name_or_path: str | os.PathLike, model: Any = None) -> dict[str, Any]:
    """The keyword arguments of a tuned preset for :func:`recdiff.generate`: ``sampler`` and its settings. With
    ``model`` (a loaded model), a :class:`PresetWarning` when the model or its device differ from where the preset
    was tuned. A preset naming a knob the diffusion sampler does not have is a :class:`RecdiffError`."""
    params = read_preset(name_or_path)
    if model is not None and params.preset is not None:
        warning = mismatch(params.preset, device_label(str(model.device)), model_weights(model), None)
        if warning:
            warnings.warn(warning, PresetWarning, stacklevel=2)
    return {"sampler": params.name, **params.params()}
