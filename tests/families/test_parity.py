"""The retrofitted families against their authors' reference code (tests/fixtures/retro_tiny, made by
``raven_modeling_minimal_{llama,olmo}.py``): every folder loads from the hub layout as its family, and recdiff
computes the reference's forward logits and latent states at every recorded r (within its own float32 spread), its
greedy static-AR tokens with per-step KV caches and a zero initial state, and its speculative tokens."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file

from recdiff import generate, load_model
from tests.families.conftest import FAMILY, spec
from tests.spread import assert_within_spread, max_abs_diff, reference_spread


def _cases(d, sampler):
    prompts = json.loads((d / "prompts.json").read_text())
    cases = json.loads((d / "generate.json").read_text())["cases"]
    return [(prompts[c["prompt"]], c) for c in cases if c["sampler"] == sampler]


def test_each_folder_loads_as_its_family(retro_dir, load_fixture_model):
    model = load_fixture_model(retro_dir)
    assert model.config.family == FAMILY[spec(retro_dir)["family"]]
    assert not model.config.tie_embeddings and model.config.eos_token_id is None


def test_forward_logits_and_latents_match_reference(retro_dir, load_fixture_model):
    """Within a few times the reference's own float32-vs-float64 spread per tensor (tests/spread.py); in float64,
    recdiff and the reference's float64 run agree to a fraction of that spread (both keep norms and RoPE angles in
    float32, so neither is exact)."""
    model = load_fixture_model(retro_dir)
    model64 = load_model(retro_dir, dtype="float64")
    ref, ref64 = load_file(retro_dir / "forward.safetensors"), load_file(retro_dir / "forward_float64.safetensors")
    spread = reference_spread(retro_dir)
    rs = spec(retro_dir)["rs"]
    assert {1, 4, 8, 16} <= set(rs)
    for name, ids in json.loads((retro_dir / "prompts.json").read_text()).items():
        for r in rs:
            out, out64 = model(torch.tensor([ids]), r=r), model64(torch.tensor([ids]), r=r)
            for i, kind in enumerate(("logits", "latent_states")):
                key = f"{name}.r{r}.{kind}"
                assert_within_spread(out[i], ref[key], spread[key], key)
                assert max_abs_diff(out64[i], ref64[key]) <= spread[key], key


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
