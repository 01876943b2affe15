"""The retrofitted families against their authors' reference code (tests/fixtures/retro_tiny, made by
``raven_modeling_minimal_{llama,olmo}.py``): every folder loads from the hub layout as its family, and recdiff
computes the reference's forward logits and latent states at every recorded r, its greedy static-AR tokens with
per-step KV caches and a zero initial state, and its speculative tokens."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file

from recdiff import generate
from tests.families.conftest import FAMILY, spec


def _cases(d, sampler):
    prompts = json.loads((d / "prompts.json").read_text())
    cases = json.loads((d / "generate.json").read_text())["cases"]
    return [(prompts[c["prompt"]], c) for c in cases if c["sampler"] == sampler]


def test_each_folder_loads_as_its_family(retro_dir, load_fixture_model):
    model = load_fixture_model(retro_dir)
    assert model.config.family == FAMILY[spec(retro_dir)["family"]]
    assert not model.config.tie_embeddings and model.config.eos_token_id is None


def test_forward_logits_and_latents_match_reference(retro_dir, load_fixture_model):
    model = load_fixture_model(retro_dir)
    ref = load_file(retro_dir / "forward.safetensors")
    rs = spec(retro_dir)["rs"]
    assert {1, 4, 8, 16} <= set(rs)
    for name, ids in json.loads((retro_dir / "prompts.json").read_text()).items():
        for r in rs:
            logits, latents = model(torch.tensor([ids]), r=r)
            torch.testing.assert_close(logits, ref[f"{name}.r{r}.logits"], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(latents, ref[f"{name}.r{r}.latent_states"], atol=1e-5, rtol=1e-5)


def test_greedy_static_ar_matches_reference(retro_dir, load_fixture_model):
    """Per-step caches (the reference's "full") at every r; at r = 1 the shared cache is the same cache."""
    model = load_fixture_model(retro_dir)
    cases = _cases(retro_dir, "generate")
    assert {c["call_kwargs"]["num_steps"] for _, c in cases} >= {1, 4, 8, 16}
    for prompt, c in cases:
        kw = c["call_kwargs"]
        policies = ("per_step", "shared") if kw["num_steps"] == 1 else ("per_step",)
        for kv_cache in policies:
            res = generate(model, prompt, "static", max_new_tokens=kw["max_new_tokens"], r=kw["num_steps"],
                           init_scale=kw["init_scale"], kv_cache=kv_cache, stop_token_ids=[])
            assert res.tokens == c["new_tokens"], (c["case"], c["prompt"], kv_cache)
            assert res.stats["core_passes"] == kw["num_steps"] * len(res.tokens)


def test_speculative_matches_reference(retro_dir, load_fixture_model):
    model = load_fixture_model(retro_dir)
    cases = _cases(retro_dir, "generate_speculative")
    assert cases
    for prompt, c in cases:
        kw = c["call_kwargs"]
        res = generate(model, prompt, "speculative", max_new_tokens=kw["max_new_tokens"], r=kw["num_steps"],
                       r_draft=kw["draft_steps"], lookahead=kw["lookahead_for_draft"], init_scale=kw["init_scale"],
                       kv_cache="per_step", stop_token_ids=[])
        assert res.tokens == c["new_tokens"][: len(res.tokens)] and len(res.tokens) == kw["max_new_tokens"]
