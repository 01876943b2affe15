"""The static buffers of a batched run fit a GPU: Huginn-0125's shapes, 32 sequences × 4,096 positions, computed
on the meta device (no memory is allocated)."""

from __future__ import annotations

from tests.meta_memory import GB, meta_huginn, predicted_bytes


def test_huginn_batch_32_at_4096_positions_fits_80_gb_next_to_the_weights():
    model = meta_huginn()
    cfg = model.config
    for sampler, params in [("static", {"r": 32}), ("diffusion", {"r": 32, "r_inner": 4, "wavefront": 128}),
                            ("speculative", {"r": 32})]:
        # the longest sequence that still fits the block
        weights, cache, state, batch = predicted_bytes(model, sampler, params, 32, cfg.block_size - 130)
        assert 6.5 * GB < weights < 7.5 * GB  # 3.5B parameters in bf16: the shapes are Huginn-0125's
        run = batch.runner
        assert run.device.type == "meta" and run.slots == 32 and run.length >= cfg.block_size - 130
        # K and V of every layer (2 prelude + 4 core, shared over recurrences, + 2 coda) for every slot and position
        per_layer = 2 * 32 * run.length * cfg.num_key_value_heads * cfg.head_dim * 2
        assert cache == 8 * per_layer
        total = weights + cache + state
        print(f"{sampler}: weights {weights / GB:.1f} GB + cache {cache / GB:.1f} GB + state {state / GB:.2f} GB")
        assert total < 80 * GB, f"{sampler}: {total / GB:.1f} GB"


def test_loopspec_keeps_a_plane_per_depth_sized_to_the_call():
    """The pipelined self-speculative sampler keeps every recurrence's K/V (per-step planes) and the coda's per
    readout: 2 prelude + 4 core × r + 2 coda × 3 layer planes of Huginn-0125's shapes. Its rows hold the call's
    longest sequence (rounded up to a power of two) plus side places, not the block: at r = 32 that is what lets a
    batch of 32 answers of 512 positions fit next to the weights."""
    model = meta_huginn()
    cfg = model.config
    for slots, longest, r, k2 in [(1, cfg.block_size, 32, None), (32, 512, 32, 8), (32, 1024, 16, None)]:
        weights, cache, state, batch = predicted_bytes(model, "loopspec", {"r": r, "r_draft": 4, "r_draft2": k2},
                                                       slots, longest)
        run = batch.runner
        side = r // 4 if k2 else 0
        assert longest + side + 1 <= run.length <= longest + side + 64      # the call's length, not the block's
        per_plane = 2 * slots * run.length * cfg.num_key_value_heads * cfg.head_dim * 2
        assert cache == (2 + 4 * r + 2 * 3) * per_plane
        total = weights + cache + state
        print(f"loopspec B={slots} L={longest} r={r}: cache {cache / GB:.1f} GB, total {total / GB:.1f} GB")
        assert total < 80 * GB, f"{total / GB:.1f} GB"


def test_ouro_1p4b_keeps_a_plane_per_loop_and_layer():
    """Ouro-1.4B's shapes (24 layers looped 4 times, no prelude or coda): per-step caches hold a K/V plane per (loop,
    layer), 4 × 24 of them, and static AR at its 4 loops with them fits next to the weights at batch 32."""
    import torch

    from recdiff.model import RecurrentDepthModel
    from recdiff.model_config import RecurrentConfig
    from recdiff.tools.shapes import SHAPES

    with torch.device("meta"):
        model = RecurrentDepthModel(RecurrentConfig(**SHAPES["ouro-1.4b"])).to(torch.bfloat16)
    cfg = model.config
    weights, cache, state, batch = predicted_bytes(model, "static", {"r": 4, "kv_cache": "per_step"}, 32, 1024)
    assert 2.5 * GB < weights < 3.2 * GB   # 1.4B parameters (untied head) in bf16
    per_plane = 2 * 32 * batch.runner.length * cfg.num_key_value_heads * cfg.head_dim * 2
    assert cache == 4 * 24 * per_plane
    assert weights + cache + state < 80 * GB
