"""A layer's elementwise work as one kernel apiece, for model steps replayed from CUDA graphs.

At batch 1 a Huginn layer's weight products stream near the copy bandwidth, but eagerly each RMS norm is eight
kernels, RoPE a dozen, and a recurrence about 250 small kernels, which keep a static r=32 token well above the
time its weights take to stream (docs/gpu.md). Inside a captured graph nothing but the kernels costs, so each
elementwise function (norm with its residual add, q/k bias with RoPE, SiLU gate) is compiled by inductor into one
kernel while the products stay cuBLAS's. Compilation happens at a graph's warm-up call (before capture);
replays never enter Python, so dynamo's per-call guards cost nothing there.

Only on CUDA with Triton and only under ``compile=True`` (:func:`recdiff.engine.runner.set_compile`); eager runs
keep the plain functions. ``RECDIFF_FUSE=0`` turns it off (the bench's side-by-side figures).
"""

from __future__ import annotations

import functools
import os
import warnings
from typing import Callable, TypeVar

import torch

F = TypeVar("F", bound=Callable)

BACKEND = "inductor"  # the tests trace with "eager" (same graphs, no code generation)


@functools.cache
def compiled(fn: F) -> F:
    """``fn`` compiled once for every shape (dynamic sizes), whole (a graph break would be a silent eager island)."""
    return torch.compile(fn, backend=BACKEND, dynamic=True, fullgraph=True)  # type: ignore[return-value]


@functools.cache
def available(device_type: str) -> bool:
    """Whether fused functions run on this device here: CUDA, Triton importable, a probe kernel compiled and run
    (a machine without a C compiler for Triton's launcher warns once and keeps the plain functions)."""
    if device_type != "cuda" or os.environ.get("RECDIFF_FUSE", "1") == "0":
        return False
    from torch.utils._triton import has_triton

    if not has_triton():
        return False
    # each function meets up to ~16 specialisations (batch and width of 1 or more, with or without a residual, two
    # dtypes): above dynamo's default of 8 it would run the rest eagerly, unfused, with a warning
    import torch._dynamo.config as dynamo_config

    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, 64)
    try:
        x = torch.ones(8, device="cuda")
        torch.compile(lambda t: t * 2 + 1, backend=BACKEND, fullgraph=True)(x).sum().item()
    except Exception as e:  # noqa: BLE001 (any compiler failure means: stay eager)
        warnings.warn(f"recdiff: fused kernels unavailable here ({type(e).__name__}: {str(e)[:120]}); "
                      "CUDA graphs replay the plain kernels", stacklevel=2)
        return False
    return True
