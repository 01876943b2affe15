"""Static autoregressive decoding: every token gets exactly r recurrences (with an exit gate's ``exit_threshold``,
each is read out at its exit recurrence, as the Ouro reference's ``exit_threshold`` reads out)."""

from __future__ import annotations

from recdiff.checks import validate
from recdiff.params import StaticParams
from recdiff.samplers.ar import ARBatch
from recdiff.samplers.base import Options

SPEC = StaticParams.spec()   # the parameters are declared in recdiff/params.py
RULES = StaticParams.rules


def make_batch(opts: Options, params: dict) -> ARBatch:
    p = validate("static", params, SPEC, RULES)
    return ARBatch(opts, r=p["r"], init_scale=p["init_scale"], kv_cache=p["kv_cache"], epsilon=None,
                   exit_threshold=p["exit_threshold"], compute_all=True)
