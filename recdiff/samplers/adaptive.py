"""Adaptive-compute autoregressive decoding: each token exits its recurrence once the latent change
‖s_k − s_{k−1}‖/‖s_k‖ (mean over the positions of the call) falls below ε, after at most r steps; with an exit gate's
``exit_threshold`` q, once its cumulative exit probability reaches q (its later recurrences are not computed; the
K/V later tokens read at those depths: the shared cache's last recurrence, or none under ``per_step``)."""

from __future__ import annotations

from recdiff.checks import validate
from recdiff.params import AdaptiveParams
from recdiff.samplers.ar import ARBatch
from recdiff.samplers.base import Options

SPEC = AdaptiveParams.spec()   # the parameters are declared in recdiff/params.py
RULES = AdaptiveParams.rules


def make_batch(opts: Options, params: dict) -> ARBatch:
    p = validate("adaptive", params, SPEC, RULES)
    return ARBatch(opts, r=p["r"], init_scale=p["init_scale"], kv_cache=p["kv_cache"], epsilon=p["epsilon"],
                   exit_in_prefill=p["exit_in_prefill"], exit_threshold=p["exit_threshold"],
                   exit_kv=p["exit_kv"])
