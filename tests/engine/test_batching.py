"""Batched decoding gives, for every sequence, exactly what that prompt gives alone: the same tokens and the same
per-sequence statistics, for every sampler, with prompts of different lengths in one batch, sequences that stop at
different steps, and continuous batching (more prompts than slots)."""

from __future__ import annotations

import pytest

from recdiff import generate
from tests.conftest import RAVEN_TINY, need_fixtures, read_cases
from tests.matrices import EVERY_SAMPLER, batch_prompts, ids
from tests.sampler_checks import check_batch_equals_alone

# Batch = alone is a property of the engine's bookkeeping, not of the weights: the matrix runs on raven_tiny alone
# (the families' folders run it in tests/families/test_samplers.py). The fast tier keeps static (both caches),
# LoopSpec and the fixed-freeze diffusion row; adaptive, speculative and the costly diffusion rows run in the full
# suite.
SLOW_ROWS = {2, 3, 4, 7, 8, 9}
ROWS = [pytest.param(s, p, marks=(pytest.mark.slow,) if i in SLOW_ROWS else ()) for i, (s, p) in
        enumerate(EVERY_SAMPLER)]


@pytest.mark.parametrize("sampler, params", ROWS, ids=ids(EVERY_SAMPLER))
def test_batch_equals_each_prompt_alone(load_fixture_model, sampler, params):
    check_batch_equals_alone(need_fixtures(RAVEN_TINY), load_fixture_model, sampler, params)


def test_one_prompt_returns_one_result_and_a_list_returns_a_list(load_fixture_model, fixture_dir):
    model = load_fixture_model(fixture_dir)
    p = batch_prompts(fixture_dir)[0]
    one = generate(model, p, "static", max_new_tokens=4, r=4)
    many = generate(model, [p], "static", max_new_tokens=4, r=4)
    assert not isinstance(one, list) and isinstance(many, list) and many[0].tokens == one.tokens


@pytest.mark.slow
def test_fixture_reference_sequences_hold_in_a_batch(fixture_dir, load_fixture_model):
    """The authors' static-AR sequences come out of a batch of both prompts unchanged."""
    model = load_fixture_model(fixture_dir)
    prompts, cases = read_cases(fixture_dir)
    for c in cases:
        if c["case"].startswith("minimal") and c["call_kwargs"].get("num_steps"):
            kw = c["call_kwargs"]
            names = sorted(prompts)
            res = generate(model, [prompts[n] for n in names], "static", max_new_tokens=kw["max_new_tokens"],
                           r=kw["num_steps"], stop_token_ids=[],
                           kv_cache="per_step" if kw["cache_lookup_strategy"] == "full" else "shared")
            assert res[names.index(c["prompt"])].tokens == c["new_tokens"][: kw["max_new_tokens"]], c["case"]
