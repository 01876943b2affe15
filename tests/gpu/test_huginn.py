"""Huginn-0125's shapes (3.5B parameters) with random bf16 weights, on a GPU: the checkpoint saves and loads
through ``recdiff.load_model``, every sampler runs at batch 1 and 32 replayed from CUDA graphs (the paper model's
default), and each run's peak memory is what the meta-device prediction of tests/meta_memory.py says (the
weights, the KV cache and the batch state) plus at most :data:`SLACK` for activations and graph pools."""

from __future__ import annotations

import gc

import pytest
import torch

from recdiff import generate, load_model, save_pretrained
from recdiff.model import RecurrentDepthModel
from recdiff.model_config import RecurrentConfig
from recdiff.tools.speed import SHAPES
from tests.gpu.common import EMULATE, needs_cuda
from tests.meta_memory import meta_huginn, predicted_bytes

# one worker builds the 3.5B model once for all cases (xdist --dist loadgroup, as tests/gpu/device_check.sh runs it)
pytestmark = [needs_cuda, pytest.mark.xdist_group("huginn"),
              pytest.mark.skipif(EMULATE, reason="Huginn-0125's shapes need a GPU (RECDIFF_EMULATE_GPU=1)")]

GB = 1e9
NEW = 8  # new tokens per prompt: each sampler's every kind of step, and a few of them
# what a run may allocate past the predicted buffers: the activations of its widest call and the CUDA graphs'
# memory pool (one per runner, its graphs sharing it; the diffusion sampler's logits buffer is predicted state)
SLACK = lambda predicted: 0.25 * predicted + 2 * GB  # noqa: E731

SAMPLERS = [
    ("static", {"r": 32}),
    ("adaptive", {"r": 32, "epsilon": 0.03}),
    ("speculative", {"r": 32, "r_draft": 4, "lookahead": 4}),
    ("diffusion", {"r": 32, "r_inner": 4, "freeze": "fixed", "eta": 0.1, "wavefront": 128}),
    ("diffusion", {"r": 32, "r_inner": 4, "epsilon": 0.03, "beta": 0.0, "eta": 0.1, "wavefront": 128}),
    ("loopspec", {"r": 32, "r_draft": 4}),
    ("loopspec", {"r": 32, "r_draft": 4, "r_draft2": 8}),
]


@pytest.fixture(scope="module")
def huginn(tmp_path_factory):
    """Random bf16 weights drawn on the GPU, saved in the official layout, loaded back with CUDA graphs on."""
    cfg = RecurrentConfig(**SHAPES["huginn"])
    with torch.device("cuda"):
        model = RecurrentDepthModel(cfg)
    model.init_weights(0)
    model = model.to(torch.bfloat16)
    probe = model.transformer.core_block[3].mlp.proj.weight[:4, :8].cpu()
    folder = save_pretrained(model, tmp_path_factory.mktemp("huginn"))
    del model
    gc.collect()
    torch.cuda.empty_cache()
    loaded = load_model(folder, device="cuda", dtype="bfloat16", compile=True)
    assert torch.equal(loaded.transformer.core_block[3].mlp.proj.weight[:4, :8].cpu(), probe)
    return loaded


@pytest.mark.parametrize("batch", [1, 32])
@pytest.mark.parametrize("sampler, params", SAMPLERS, ids=["static", "adaptive", "speculative", "diffusion-fixed",
                                                           "diffusion-adaptive", "loopspec", "loopspec-q2"])
def test_huginn_runs_every_sampler_within_the_predicted_memory(huginn, sampler, params, batch):
    model = huginn
    model.__dict__.pop("_runners", None)  # each case allocates its own buffers, measured from here
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    g = torch.Generator().manual_seed(batch)
    prompts = [torch.randint(0, model.config.vocab_size, (int(n),), generator=g).tolist()
               for n in torch.randint(16, 49, (batch,), generator=g)]
    res = generate(model, prompts, sampler, max_new_tokens=NEW, stop_token_ids=[], batch_size=batch, **params)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    assert len(res) == batch
    for r in res:
        assert 1 <= len(r.tokens) <= NEW and all(0 <= t < model.config.padded_vocab_size for t in r.tokens)
        assert len(r.tokens) == NEW or r.stats.get("max_steps_reached")
    weights, cache, state, _ = predicted_bytes(meta_huginn(), sampler, params, batch,
                                               max(len(p) for p in prompts) + NEW)
    predicted = weights + cache + state
    print(f"{sampler} {params} B={batch}: peak {peak / GB:.2f} GB; predicted weights {weights / GB:.2f} + cache "
          f"{cache / GB:.2f} + state {state / GB:.3f} = {predicted / GB:.2f} GB")
    assert predicted <= peak <= predicted + SLACK(predicted), (
        f"peak {peak / GB:.2f} GB against the predicted {predicted / GB:.2f} GB "
        f"(+ at most {SLACK(predicted) / GB:.1f})")
