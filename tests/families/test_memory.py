"""The retrofitted checkpoints' real shapes (recdiff.bench's SHAPES, on the meta device: nothing is allocated): the
parameter count of the published Llama-3.2 retrofit, GQA's smaller K/V, the shared cache's r-fold saving, and a
batch of 32 sequences at the full block next to the weights within a GPU's 80 GB."""

from __future__ import annotations

import pytest
import torch

from recdiff.model import RecurrentDepthModel
from recdiff.model_config import RecurrentConfig
from recdiff.tools.speed import SHAPES
from tests.meta_memory import predicted_bytes

GB = 1e9
FAMILIES = ("tinyllama", "llama-3.2", "olmo-2")


def meta_model(name: str) -> RecurrentDepthModel:
    with torch.device("meta"):
        return RecurrentDepthModel(RecurrentConfig(**SHAPES[name])).to(torch.bfloat16)


def test_the_shapes_are_the_published_models():
    # smcleish/Recurrent-Llama-3.2-*: 1,385,228,288 parameters (its safetensors header), untied head included
    assert meta_model("llama-3.2").num_parameters() == 1_385_228_288
    assert {n: meta_model(n).config.family for n in FAMILIES} == {
        "tinyllama": "retro_llama", "llama-3.2": "retro_llama", "olmo-2": "retro_olmo"}


@pytest.mark.parametrize("name", FAMILIES)
def test_batch_32_at_the_full_block_fits_80_gb_and_shares_its_cache(name):
    model = meta_model(name)
    cfg = model.config
    for sampler, params in [("static", {"r": 32}), ("diffusion", {"r": 32, "r_inner": 4, "wavefront": 128}),
                            ("speculative", {"r": 32})]:
        weights, cache, state, batch = predicted_bytes(model, sampler, params, 32, cfg.block_size - 130)
        run = batch.runner
        # K and V of every layer (prelude, core shared over recurrences, coda): the KV heads' width, not the heads'
        per_layer = 2 * 32 * run.length * cfg.num_key_value_heads * cfg.head_dim * 2
        assert cache == cfg.n_layers * per_layer
        assert weights + cache + state < 80 * GB, f"{name} {sampler}"
    # per-step caches: r times the core's K/V per position (sized to the call; shared caches to the block)
    _, per_step, _, step_batch = predicted_bytes(model, "static", {"r": 32, "kv_cache": "per_step"}, 1, 512)
    _, shared, _, batch = predicted_bytes(model, "static", {"r": 32}, 1, 512)
    n_core, n_fixed = cfg.n_layers_in_recurrent_block, cfg.n_layers - cfg.n_layers_in_recurrent_block
    per_position = 2 * cfg.num_key_value_heads * cfg.head_dim * 2
    assert shared == batch.runner.length * per_position * (n_fixed + n_core)
    assert per_step == step_batch.runner.length * per_position * (n_fixed + 32 * n_core)
