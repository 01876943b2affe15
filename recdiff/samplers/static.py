"""Static autoregressive decoding: every token gets exactly r recurrences."""

from __future__ import annotations

from recdiff.samplers.ar import run_ar
from recdiff.samplers.base import Context, GenerationResult, non_negative, one_of, positive_int, validate

SPEC = {
    "r": (32, positive_int),
    "init_scale": (0.0, non_negative),
    "kv_cache": ("shared", one_of("shared", "per_step")),
}


def generate(ctx: Context, params: dict) -> GenerationResult:
    p = validate("static", params, SPEC)
    return run_ar(ctx, r=p["r"], init_scale=p["init_scale"], kv_cache=p["kv_cache"], epsilon=None)
