"""recdiff: diffusion-forcing samplers for recurrent-depth language models, with sweeps and Pareto analysis.

Public API: :func:`load_model`, :func:`generate`, :func:`warm_up`, :func:`load_preset` (a tuned preset's settings for
:func:`generate`), :class:`RecdiffError`, :class:`DiffusionTrace`. The heavy
submodules (torch) load on first use, so ``recdiff.errors`` and the analysis package stay quick to import.
"""

from __future__ import annotations

import importlib
from typing import Any

from recdiff.errors import RecdiffError

_LAZY = {
    "load_model": "recdiff.checkpoint",
    "save_pretrained": "recdiff.checkpoint",
    "generate": "recdiff.samplers",
    "warm_up": "recdiff.samplers",
    "GenerationResult": "recdiff.samplers",
    "SAMPLERS": "recdiff.samplers",
    "sampler_spec": "recdiff.samplers",
    "check_params": "recdiff.samplers",
    "default_batch_size": "recdiff.samplers",
    "DiffusionTrace": "recdiff.trace",
    "load_preset": "recdiff.presets",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'recdiff' has no attribute {name!r}")


__all__ = ["RecdiffError", *_LAZY]
