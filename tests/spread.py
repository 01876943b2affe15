"""Parity tolerances from a measured spread, not from the machine a fixture was made on.

A float32 result differs from the exact one by rounding, and by how much depends on the kernels a CPU runs (AVX-512
on one Xeon, AVX2 on an EPYC: the same reference run gives other float32 bits on each). Each reference fixture
records its own spread: the reference's float32 outputs against a float64 run of the same reference code, per tensor
(raven_tiny: ``meta.forward_float32_vs_float64_max_abs_diff``; retro_tiny: ``forward_float64.safetensors``). recdiff's
float32 result and the reference's are two roundings of one computation, so they differ by at most about twice that
spread. Measured on an AMD EPYC against fixtures made on an Intel Xeon: at most 1.39 spreads (retro_tiny, 64 tensors)
and 1.25 (raven_tiny and its perturbed twin, 44 tensors); the tests allow :data:`SPREAD_MULTIPLE` spreads. A wrong
computation is off by far more: a transposed RoPE pairing, a missing norm or a GQA mix-up moves logits by 1e-2 or
more."""

from __future__ import annotations

import json
from pathlib import Path

import torch

SPREAD_MULTIPLE = 4.0


def reference_spread(fixture: Path) -> dict[str, float]:
    """The fixture's own max |float32 − float64| per forward tensor: recorded in raven_tiny's meta, computed from the
    two forward files of a retro_tiny folder."""
    meta = json.loads((fixture / "generate.json").read_text())["meta"]
    if "forward_float32_vs_float64_max_abs_diff" in meta:
        return meta["forward_float32_vs_float64_max_abs_diff"]
    from safetensors.torch import load_file

    f32, f64 = load_file(fixture / "forward.safetensors"), load_file(fixture / "forward_float64.safetensors")
    return {k: max_abs_diff(f32[k], f64[k]) for k in f32}


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()


def assert_within_spread(got: torch.Tensor, ref: torch.Tensor, spread: float, what: str) -> None:
    """``got`` equals the reference's float32 ``ref`` up to :data:`SPREAD_MULTIPLE` × its float32-vs-float64
    ``spread``."""
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)}, reference {tuple(ref.shape)}"
    assert spread > 0, f"{what}: no spread recorded"
    diff = max_abs_diff(got, ref)
    assert diff <= SPREAD_MULTIPLE * spread, (
        f"{what}: max |recdiff - reference| = {diff:.3g}, more than {SPREAD_MULTIPLE:g} x the reference's own "
        f"float32-vs-float64 spread {spread:.3g}")
