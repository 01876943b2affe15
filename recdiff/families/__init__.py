"""Model families: one module per family, each declaring a :class:`~recdiff.families.base.Family` as ``FAMILY``.

Every module of this package that defines ``FAMILY`` is a family (a new family is one new module; docs/families.md).
Telling a checkpoint's family from its files is :mod:`recdiff.recognition`'s job (it builds the model, which is
built from these families). Nothing outside the model layer (``recdiff/model.py``, ``recdiff/layers.py``,
``recdiff/config.py``, ``recdiff/recognition.py``, ``recdiff/load.py`` and this package) knows which family it runs.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from typing import Any

from recdiff.config import RecurrentConfig
from recdiff.errors import RecdiffError
from recdiff.families.base import Family


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
    code expects (:attr:`Family.write`)."""
    return {**cfg.to_dict(), **get_family(cfg.family).write(cfg)}
