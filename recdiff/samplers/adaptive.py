"""Adaptive-compute autoregressive decoding: each token exits its recurrence once the latent change
‖s_k − s_{k−1}‖/‖s_k‖ (mean over the positions of the call) falls below ε, after at most r steps."""

from __future__ import annotations

from recdiff.samplers.ar import ARBatch
from recdiff.samplers.base import Options, boolean, non_negative, one_of, positive, recurrence, validate

SPEC = {
    "r": (32, recurrence),
    "epsilon": (0.03, positive),
    "init_scale": (0.0, non_negative),
    "kv_cache": ("shared", one_of("shared", "per_step")),
    # the authors' sampler also exits during the prefill (mean δ over the prompt); False prefills at r
    "exit_in_prefill": (True, boolean),
}

RULES: list = []


def make_batch(opts: Options, params: dict) -> ARBatch:
    p = validate("adaptive", params, SPEC, RULES)
    return ARBatch(opts, r=p["r"], init_scale=p["init_scale"], kv_cache=p["kv_cache"], epsilon=p["epsilon"],
                   exit_in_prefill=p["exit_in_prefill"])
