"""Greedy sequences of the autoregressive samplers against the authors' reference outputs.

Adapter (documented differences in how the reference reports, not in what it computes):
- cache names: the reference's ``full`` is our ``per_step``, ``latest-m4-compress-s4`` is our ``shared``;
- the speculative reference may return more than ``max_new_tokens`` (it keeps whole accepted rounds); we stop at
  ``max_new_tokens``, so we compare our tokens with the same-length prefix of theirs.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from recdiff import generate
from tests.conftest import read_cases
from tests.spread import assert_within_spread, reference_spread

CACHE = {"full": "per_step", "latest-m4-compress-s4": "shared"}


def _cases(d, sampler):
    prompts, cases = read_cases(d)
    return [(prompts[c["prompt"]], c) for c in cases if c["sampler"] == sampler]


def test_static_ar_sequences_and_selector_logits(fixture_dir, fixture_prompt, load_fixture_model):
    model = load_fixture_model(fixture_dir)
    ref_logits = load_file(fixture_dir / "generate_logits.safetensors")
    cases = [(p, c) for p, c in _cases(fixture_dir, "generate_minimal") if c["prompt"] == fixture_prompt]
    assert cases
    for prompt, c in cases:
        kw = c["call_kwargs"]
        res = generate(model, prompt, "static", max_new_tokens=kw["max_new_tokens"], r=kw["num_steps"],
                       kv_cache=CACHE[kw["cache_lookup_strategy"]])
        assert res.tokens == c["new_tokens"], c["case"]
        assert res.stats["core_passes"] == kw["num_steps"] * len(res.tokens)
        assert res.stats["steps_per_token"] == [kw["num_steps"]] * len(res.tokens)
        # the first selector row is the prefill's last logits: the cached pass must reproduce it
        first, _ = model(torch.tensor([prompt]), r=kw["num_steps"])
        key = f"{c['case']}.{c['prompt']}.selector_logits"
        # the spread of the reference's forward logits of this prompt, the largest over the depths it recorded
        spread = max(v for k, v in reference_spread(fixture_dir).items() if k.startswith(f"{c['prompt']}.r")
                     and k.endswith(".logits"))
        assert_within_spread(first[0, -1], ref_logits[key][0], spread, key)


@pytest.mark.slow
def test_adaptive_ar_sequences_and_exit_steps(load_fixture_model):
    from tests.conftest import RAVEN_TINY

    model = load_fixture_model(RAVEN_TINY)
    cases = _cases(RAVEN_TINY, "generate_with_adaptive_compute")
    assert len(cases) == 8
    for prompt, c in cases:
        kw = c["call_kwargs"]
        res = generate(model, prompt, "adaptive", max_new_tokens=kw["max_new_tokens"], r=kw["num_steps"],
                       epsilon=kw["exit_threshold"], kv_cache=CACHE[kw["cache_lookup_strategy"]])
        assert res.tokens == c["new_tokens"], c["case"]
        assert res.stats["steps_per_token"] == c["compute_steps_per_token"], c["case"]
        assert res.stats["core_passes"] == sum(c["compute_steps_per_token"])


@pytest.mark.slow
def test_speculative_sequence(fixture_dir, load_fixture_model):
    model = load_fixture_model(fixture_dir)
    cases = _cases(fixture_dir, "generate_speculative")
    if not cases:
        pytest.skip("no speculative case in this folder")
    for prompt, c in cases:
        kw = c["call_kwargs"]
        res = generate(model, prompt, "speculative", max_new_tokens=kw["max_new_tokens"], r=kw["num_steps"],
                       r_draft=kw["draft_steps"], lookahead=kw["lookahead_for_draft"], kv_cache="per_step")
        assert len(res.tokens) == kw["max_new_tokens"]
        assert res.tokens == c["new_tokens"][: len(res.tokens)]
        # verification at r makes it agree with static AR at r
        static = generate(model, prompt, "static", max_new_tokens=kw["max_new_tokens"], r=kw["num_steps"],
                          kv_cache="per_step")
        assert res.tokens == static.tokens
        assert res.stats["core_passes"] < static.stats["core_passes"] * 2  # drafting is cheap
