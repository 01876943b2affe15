"""Compiled decoding on the retrofitted families (``compile=True`` on a CPU: torch.compile of P, R and C, grouped-
query attention and rotate-half RoPE inside the graphs) gives the eager tokens, batched, and under per-step caches,
with the quick inductor settings and the cut (tests/matrices.py's ``shallow``) of tests/engine/test_compile.py.

The samplers are those of tests/matrices.py's ONE_PER_SAMPLER whose compiled programs hold a family's blocks in a
graph of their own kind: static (P, four recurrences and one, C; a prefill's many rows and a step's few), adaptive
(the exit piece) and diffusion (the window's P and the step's tensor functions). Speculative decoding compiles the
same P, R and C at a draft's width, a specialisation of pieces static already holds, and the pipelined
self-speculative sampler's lane pieces are the same blocks under another mask; both are compiled on Huginn's layout
in tests/engine/test_compile.py."""

from __future__ import annotations

import pytest

from recdiff import generate, load_model
from tests.matrices import ONE_PER_SAMPLER, QUICK, prompts, shallow

pytestmark = pytest.mark.slow

FAMILY_GRAPHS = [(s, p) for s, p in ONE_PER_SAMPLER if s not in ("speculative", "loopspec")]


def test_compiled_gives_the_eager_tokens(conv_dir, tmp_path):
    small = shallow(conv_dir, tmp_path / conv_dir.name)
    eager = load_model(small)
    compiled = load_model(small, compile=True)
    compiled.engine_options["inductor"] = QUICK
    ps = prompts(small)
    for sampler, params in FAMILY_GRAPHS:
        want = [generate(eager, p, sampler, max_new_tokens=10, stop_token_ids=[], **params).tokens for p in ps]
        got = generate(compiled, ps, sampler, max_new_tokens=10, stop_token_ids=[], batch_size=len(ps), **params)
        assert [r.tokens for r in got] == want, sampler
    kw = dict(max_new_tokens=6, stop_token_ids=[], kv_cache="per_step", r=3)
    assert generate(compiled, ps[0], "static", **kw).tokens == generate(eager, ps[0], "static", **kw).tokens
