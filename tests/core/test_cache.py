"""KV-cache properties: cached decoding equals recomputation; shared uses r-times less memory; pointer rollback."""

from __future__ import annotations

import torch

from recdiff import generate
from recdiff.cache import KVCache
from tests.conftest import RAVEN_TINY

PROMPT = [5, 17, 300, 42, 9]


def _greedy_without_cache(model, prompt, n, r):
    """Recompute the full forward over the whole sequence for every token (per-step attention = no sharing)."""
    ids = list(prompt)
    for _ in range(n):
        logits, _ = model(torch.tensor([ids]), r=r)
        ids.append(int(logits[0, -1].argmax()))
    return ids[len(prompt):]


def test_cached_generation_equals_full_recomputation(load_fixture_model):
    model = load_fixture_model(RAVEN_TINY)
    for r in (1, 4, 8):
        expected = _greedy_without_cache(model, PROMPT, 10, r)
        assert generate(model, PROMPT, "static", max_new_tokens=10, r=r, kv_cache="per_step").tokens == expected


def test_cached_logits_equal_full_forward_logits(load_fixture_model):
    """Decode one position at a time through the cache: every row equals the no-cache forward's row."""
    model = load_fixture_model(RAVEN_TINY)
    ids = torch.tensor([PROMPT + [7, 8, 9]])
    full, _ = model(ids, r=4)
    model.setup_cache(ids.shape[1], "per_step", max_steps=4)
    rows = []
    for pos in range(ids.shape[1]):
        e = model.embed(ids[:, pos : pos + 1], pos)
        z = torch.zeros_like(e)
        for k in range(4):
            z = model.core_step(z, e, pos, k)
        rows.append(model.decode(z, pos)[0, 0])
    torch.testing.assert_close(torch.stack(rows), full[0], atol=1e-5, rtol=1e-5)


def test_shared_cache_uses_r_times_less_core_memory(load_fixture_model):
    model = load_fixture_model(RAVEN_TINY)
    cfg = model.config
    for r in (4, 32):
        shared = KVCache(cfg, 100, "shared", max_steps=r)
        per_step = KVCache(cfg, 100, "per_step", max_steps=r)
        per_layer = 2 * 100 * cfg.num_key_value_heads * cfg.head_dim * 4  # K and V, float32
        n_fixed = cfg.n_layers_in_prelude + cfg.n_layers_in_coda
        assert shared.nbytes() == per_layer * (n_fixed + cfg.n_layers_in_recurrent_block)  # = a fixed-depth model
        assert per_step.nbytes() == per_layer * (n_fixed + r * cfg.n_layers_in_recurrent_block)
        core_shared = shared.nbytes() - per_layer * n_fixed
        assert per_step.nbytes() - per_layer * n_fixed == r * core_shared
    res = generate(model, PROMPT, "static", max_new_tokens=4, r=8, kv_cache="per_step")
    res2 = generate(model, PROMPT, "static", max_new_tokens=4, r=8, kv_cache="shared")
    assert res.stats["kv_cache_bytes"] > res2.stats["kv_cache_bytes"]


def test_rollback_is_a_pointer_move_and_stale_entries_are_never_read(load_fixture_model):
    """Write garbage beyond the pointer, then decode: results unchanged (speculative rollback relies on it)."""
    model = load_fixture_model(RAVEN_TINY)
    ids = torch.tensor([PROMPT])
    cache = model.setup_cache(16, "shared")
    e = model.embed(ids, 0)
    z = torch.zeros_like(e)
    for k in range(4):
        z = model.core_step(z, e, 0, k)
    model.decode(z, 0)
    cache.length = len(PROMPT)
    k_ptr = cache.k.data_ptr()

    def next_logits():
        nxt = torch.tensor([[11]])
        e1 = model.embed(nxt, len(PROMPT))
        z1 = torch.zeros_like(e1)
        for k in range(4):
            z1 = model.core_step(z1, e1, len(PROMPT), k)
        return model.decode(z1, len(PROMPT))

    before = next_logits()
    cache.k[:, :, :, len(PROMPT) + 1 :] = 1e3  # stale entries past the pointer
    cache.v[:, :, :, len(PROMPT) + 1 :] = -1e3
    torch.testing.assert_close(next_logits(), before, atol=0, rtol=0)
    assert cache.k.data_ptr() == k_ptr  # nothing reallocated
