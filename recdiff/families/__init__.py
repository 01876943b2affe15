"""Model families: one module per family, each declaring a :class:`~recdiff.families.base.Family` as ``FAMILY``.

Every module of this package that defines ``FAMILY`` is a family (a new family is one new module; docs/families.md).
Telling a checkpoint's family from its files is :mod:`recdiff.recognition`'s job (it builds the model, which is
built from these families). Nothing outside the model layer (``recdiff/model.py``, ``recdiff/layers.py``,
``recdiff/model_config.py``, ``recdiff/recognition.py``, ``recdiff/checkpoint.py`` and this package) knows which
family it runs.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from typing import Any

import torch

from recdiff.errors import RecdiffError
from recdiff.families.base import Family
from recdiff.model_config import RecurrentConfig


@functools.cache
def families() -> dict[str, Family]:
    """Every family, by name, in the order of their module names."""
    out: dict[str, Family] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        fam = getattr(module, "FAMILY", None)
        if isinstance(fam, Family):
            out[fam.name] = fam
    return out


def get_family(name: str) -> Family:
    fams = families()
    if name not in fams:
        raise RecdiffError(f"unknown model family {name!r}; choose one of {', '.join(fams)}")
    return fams[name]


def config_json(cfg: RecurrentConfig) -> dict[str, Any]:
    """``config.json`` in the official layout: recdiff's fields (those set) plus the keys the family's reference
    code expects (:attr:`Family.write`); a family that ``writes_all`` writes its own keys alone."""
    fam = get_family(cfg.family)
    return fam.write(cfg) if fam.writes_all else {**cfg.to_dict(), **fam.write(cfg)}


def checkpoint_names(cfg: RecurrentConfig, ours: set[str]) -> set[str]:
    """The names a checkpoint of ``cfg``'s family holds for recdiff's tensors ``ours``."""
    layout = get_family(cfg.family).layout
    if layout is None:
        return set(ours)
    table = layout(cfg)
    return {theirs for name in ours for theirs, _ in table.get(name, [(name, 0)])}


def from_checkpoint(cfg: RecurrentConfig, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A checkpoint's tensors under recdiff's names (stacked where recdiff fuses several)."""
    layout = get_family(cfg.family).layout
    if layout is None:
        return tensors
    out = dict(tensors)
    for ours, parts in layout(cfg).items():
        if all(theirs in out for theirs, _ in parts):
            pieces = [out.pop(theirs) for theirs, _ in parts]
            out[ours] = pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=0)
    return out


def to_checkpoint(cfg: RecurrentConfig, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """recdiff's tensors under the names the family's checkpoints use (split where recdiff fuses several)."""
    layout = get_family(cfg.family).layout
    if layout is None:
        return tensors
    out = dict(tensors)
    for ours, parts in layout(cfg).items():
        if ours in out:
            t = out.pop(ours)
            for (theirs, _), piece in zip(parts, torch.split(t, [rows for _, rows in parts], dim=0)):
                out[theirs] = piece.contiguous()
    return out
