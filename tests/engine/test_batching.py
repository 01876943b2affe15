"""Batched decoding gives, for every sequence, exactly what that prompt gives alone: the same tokens and the same
per-sequence statistics, for every sampler, with prompts of different lengths in one batch, sequences that stop at
different steps, and continuous batching (more prompts than slots)."""

from __future__ import annotations

import json

import pytest

from recdiff import generate
from tests.conftest import read_cases

# every sampler, and the diffusion sampler with both adaptive rules, headway and noise
CONFIGS = [
    ("static", {"r": 8}),
    ("static", {"r": 4, "kv_cache": "per_step"}),
    ("adaptive", {"r": 16, "epsilon": 0.05}),
    ("adaptive", {"r": 16, "epsilon": 0.05, "kv_cache": "per_step", "exit_in_prefill": False}),
    ("speculative", {"r": 8, "r_draft": 2, "lookahead": 3}),
    ("diffusion", {"r": 8, "r_inner": 2, "freeze": "fixed"}),
    ("diffusion", {"r": 16, "r_inner": 4, "epsilon": 0.05, "wavefront": 24}),
    ("diffusion", {"r": 16, "r_inner": 4, "epsilon": 0.05, "wavefront": 24, "adaptive_rule": "reference",
                   "freeze_rule": "last"}),
    ("diffusion", {"r": 8, "r_inner": 2, "epsilon": 0.05, "wavefront": 6, "headway": 2, "beta": 0.3,
                   "init_scale": 0.5, "eta": 0.2, "continuous_compute": True}),
]


def batch_prompts(d):
    """The fixture's prompts plus prefixes and a concatenation of them: lengths from 3 to 19 tokens."""
    prompts = list(json.loads((d / "prompts.json").read_text()).values())
    a, b = prompts[0], prompts[1]
    return [a, b, a[:3], b[:5], a + b, a[:9], b[2:]]


def stop_token(model, prompts, limits, sampler, params):
    """A token that some sequences produce within their limit and others do not, so that in the batch some stop
    on it and others at their length limit."""
    runs = [generate(model, p, sampler, max_new_tokens=n, stop_token_ids=[], **params).tokens
            for p, n in zip(prompts, limits)]
    counts = {t: sum(t in r for r in runs) for r in runs for t in r}
    return max(counts, key=lambda t: (counts[t] < len(runs), counts[t]))


def comparable(stats):
    return {k: v for k, v in stats.items() if k != "kv_cache_bytes"}


@pytest.mark.parametrize("sampler, params", CONFIGS, ids=[f"{s}-{i}" for i, (s, _) in enumerate(CONFIGS)])
def test_batch_equals_each_prompt_alone(fixture_dir, load_fixture_model, sampler, params):
    model = load_fixture_model(fixture_dir)
    prompts = batch_prompts(fixture_dir)
    limits = [16, 9, 20, 5, 12, 1, 14]
    stop = stop_token(model, prompts, limits, sampler, params)
    alone = [generate(model, p, sampler, max_new_tokens=n, stop_token_ids=[stop], **params)
             for p, n in zip(prompts, limits)]
    assert len({len(r.tokens) for r in alone}) > 2  # the sequences really end at different steps
    assert len({r.stopped_by for r in alone}) > 1  # some stop on the token (or the step cap), others at length
    for batch_size in (3, len(prompts)):
        together = generate(model, prompts, sampler, max_new_tokens=limits, stop_token_ids=[stop],
                            batch_size=batch_size, **params)
        assert isinstance(together, list) and len(together) == len(prompts)
        for i, (one, many) in enumerate(zip(alone, together)):
            assert many.tokens == one.tokens, (i, batch_size)
            assert many.stopped_by == one.stopped_by, (i, batch_size)
            assert comparable(many.stats) == comparable(one.stats), (i, batch_size)


def test_one_prompt_returns_one_result_and_a_list_returns_a_list(load_fixture_model, fixture_dir):
    model = load_fixture_model(fixture_dir)
    p = batch_prompts(fixture_dir)[0]
    one = generate(model, p, "static", max_new_tokens=4, r=4)
    many = generate(model, [p], "static", max_new_tokens=4, r=4)
    assert not isinstance(one, list) and isinstance(many, list) and many[0].tokens == one.tokens


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
