"""Compiled decoding (``compile=True``: torch.compile on a CPU, the same static shapes as the CUDA-graph path) gives
the eager tokens, compiles once per shape and never again, and the graph-replay protocol holds on a CPU."""

from __future__ import annotations

import json

import pytest
import torch
from torch._dynamo.utils import counters

from recdiff import generate, load_model
from recdiff.engine.runner import set_compile
from tests.conftest import RAVEN_TINY

# one per sampler (compiling is the slow part of these tests); the diffusion row exercises adaptive freezing,
# headway and momentum, and its width changes from step to step
CONFIGS = [
    ("static", {"r": 6}),
    ("adaptive", {"r": 8, "epsilon": 0.05}),
    ("speculative", {"r": 6, "r_draft": 2, "lookahead": 3}),
    ("diffusion", {"r": 8, "r_inner": 2, "epsilon": 0.05, "headway": 2, "eta": 0.2}),
]


def prompts(d, n=None):
    base = list(json.loads((d / "prompts.json").read_text()).values())
    out = [base[0], base[1], base[0][:4], base[0] + base[1]]
    return out if n is None else [(base[i % 2] * 4)[: 3 + i % 17] for i in range(n)]


@pytest.fixture(scope="module")
def compiled_model():
    model = load_model(RAVEN_TINY)
    set_compile(model, True)
    return model


def test_compiled_gives_the_eager_tokens(compiled_model, load_fixture_model):
    eager = load_fixture_model(RAVEN_TINY)
    ps = prompts(RAVEN_TINY)
    for sampler, params in CONFIGS:
        want = [generate(eager, p, sampler, max_new_tokens=10, stop_token_ids=[], **params).tokens for p in ps]
        together = generate(compiled_model, ps, sampler, max_new_tokens=10, stop_token_ids=[], batch_size=len(ps),
                            **params)
        assert [r.tokens for r in together] == want, sampler
    sampler, params = CONFIGS[-1]
    assert generate(compiled_model, ps[0], sampler, max_new_tokens=10, stop_token_ids=[], **params).tokens == want[0]


def test_no_compilation_after_warm_up_across_many_prompt_lengths(compiled_model):
    """Warm-up: the longest prompt, alone and in a batch. Then 50 prompts of 3 to 19 tokens, alone and batched:
    dynamo compiles no new frame (prefills run eagerly, decoding steps keep their static shapes)."""
    ps = prompts(RAVEN_TINY, 50)
    assert len({len(p) for p in ps}) >= 15
    sampler, params = CONFIGS[-1]
    kw = dict(max_new_tokens=10, stop_token_ids=[], **params)
    longest = max(ps, key=len)
    generate(compiled_model, longest, sampler, **kw)
    generate(compiled_model, [longest] * 4, sampler, batch_size=4, **kw)
    before = counters["stats"]["unique_graphs"]
    assert before > 0  # the warm-up compiled something: this test counts real compilations
    for p in ps:
        generate(compiled_model, p, sampler, **kw)
    generate(compiled_model, ps, sampler, batch_size=4, **kw)
    assert counters["stats"]["unique_graphs"] == before


def test_graph_replay_protocol_on_cpu(load_fixture_model):
    """``emulate_graphs`` runs the CUDA-graph path (whole steps replayed from static buffers whose outputs the next
    replay overwrites) on a CPU: the tokens are the eager ones."""
    eager = load_fixture_model(RAVEN_TINY)
    graphed = load_model(RAVEN_TINY)
    graphed.engine_options["emulate_graphs"] = True
    ps = prompts(RAVEN_TINY)
    for sampler, params in CONFIGS:
        want = [generate(eager, p, sampler, max_new_tokens=10, stop_token_ids=[], **params).tokens for p in ps]
        got = generate(graphed, ps, sampler, max_new_tokens=10, stop_token_ids=[], batch_size=3, **params)
        assert [r.tokens for r in got] == want, sampler


def test_bfloat16_runs_every_sampler_batched_and_compiled_close_to_float32(load_fixture_model):
    """The GPU's dtype on a CPU: bf16 weights and cache, norms/RoPE/softmax/δ in float32 as in the eager path."""
    fp32 = load_fixture_model(RAVEN_TINY)
    bf16 = load_model(RAVEN_TINY, dtype="bfloat16", compile=True)
    assert next(bf16.parameters()).dtype == torch.bfloat16
    ps = prompts(RAVEN_TINY)
    same = total = 0
    for sampler, params in CONFIGS:
        want = generate(fp32, ps, sampler, max_new_tokens=10, stop_token_ids=[], **params)
        got = generate(bf16, ps, sampler, max_new_tokens=10, stop_token_ids=[], batch_size=len(ps), **params)
        for a, b in zip(want, got):
            assert len(b.tokens) == len(a.tokens)
            same += sum(x == y for x, y in zip(a.tokens, b.tokens))
            total += len(a.tokens)
    assert same / total >= 0.9, f"bf16 agrees with fp32 on {same}/{total} positions"
