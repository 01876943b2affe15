"""Static autoregressive decoding: every token gets exactly r recurrences."""

from __future__ import annotations

from recdiff.samplers.ar import ARBatch
from recdiff.samplers.base import Options, non_negative, one_of, recurrence, validate

SPEC = {
    "r": (32, recurrence),
    "init_scale": (0.0, non_negative),
    "kv_cache": ("shared", one_of("shared", "per_step")),
}

RULES: list = []


def make_batch(opts: Options, params: dict) -> ARBatch:
    p = validate("static", params, SPEC, RULES)
    return ARBatch(opts, r=p["r"], init_scale=p["init_scale"], kv_cache=p["kv_cache"], epsilon=None)
