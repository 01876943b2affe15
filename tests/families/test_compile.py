"""Compiled decoding on the retrofitted families (``compile=True`` on a CPU: torch.compile of P, R and C, grouped-
query attention and rotate-half RoPE inside the graphs) gives the eager tokens, batched, for every sampler of
tests/matrices.py's ONE_PER_SAMPLER, and under per-step caches; with the same quick inductor settings."""

from __future__ import annotations

import pytest

from recdiff import generate, load_model
from tests.matrices import ONE_PER_SAMPLER, QUICK, prompts

pytestmark = pytest.mark.slow


def test_compiled_gives_the_eager_tokens(conv_dir, load_fixture_model):
    eager = load_fixture_model(conv_dir)
    compiled = load_model(conv_dir, compile=True)
    compiled.engine_options["inductor"] = QUICK
    ps = prompts(conv_dir)
    for sampler, params in ONE_PER_SAMPLER:
        want = [generate(eager, p, sampler, max_new_tokens=10, stop_token_ids=[], **params).tokens for p in ps]
        got = generate(compiled, ps, sampler, max_new_tokens=10, stop_token_ids=[], batch_size=len(ps), **params)
        assert [r.tokens for r in got] == want, sampler
    kw = dict(max_new_tokens=6, stop_token_ids=[], kv_cache="per_step", r=3)
    assert generate(compiled, ps[0], "static", **kw).tokens == generate(eager, ps[0], "static", **kw).tokens
