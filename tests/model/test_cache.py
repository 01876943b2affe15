"""KV-cache properties: cached decoding equals recomputation; shared uses r-times less memory; pointer rollback."""

from __future__ import annotations

import torch

from recdiff import generate
from recdiff.cache import SlotKV, make_call
from recdiff.engine.runner_cache import cache_length, call_length
from tests.conftest import RAVEN_TINY
from tests.spread import assert_within_spread, reference_spread

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


def _decode_one(model, cache, ids, pos, r, row=0):
    """P, r recurrences, C for one position of one cache row, through the cache."""
    call = make_call(model.freqs_cis, torch.tensor([[pos]]), cache.length, rows=torch.tensor([row]))
    e = model.embed(ids, call, cache)
    z = torch.zeros_like(e)
    for k in range(r):
        z = model.core_step(z, e, call, cache, k)
    return model.decode(z, call, cache)


def test_cached_logits_equal_full_forward_logits(load_fixture_model):
    """Decode one position at a time through the cache, in row 1 of a 3-row cache (rows are independent): every
    row equals the no-cache forward's row."""
    model = load_fixture_model(RAVEN_TINY)
    ids = torch.tensor([PROMPT + [7, 8, 9]])
    full, _ = model(ids, r=4)
    cache = SlotKV(model.config, 3, 16, "per_step", max_steps=4)
    for t in cache.k + cache.v:
        t[0] = 1e3  # another sequence's rows must not leak in
    rows = [_decode_one(model, cache, ids[:, p : p + 1], p, 4, row=1)[0, 0] for p in range(ids.shape[1])]
    # two float32 paths of one computation (cached attention, the no-cache one): within the reference's own spread
    # of its r = 4 logits (tests/spread.py), as recdiff and the reference are
    spread = max(v for k, v in reference_spread(RAVEN_TINY).items() if k.endswith(".r4.logits"))
    assert_within_spread(torch.stack(rows), full[0], spread, "cached decoding")


def test_shared_cache_uses_r_times_less_core_memory(load_fixture_model):
    model = load_fixture_model(RAVEN_TINY)
    cfg = model.config
    for r in (4, 32):
        shared = SlotKV(cfg, 1, 100, "shared", max_steps=r)
        per_step = SlotKV(cfg, 1, 100, "per_step", max_steps=r)
        per_layer = 2 * 100 * cfg.num_key_value_heads * cfg.head_dim * 4  # K and V, float32
        n_fixed = cfg.n_layers_in_prelude + cfg.n_layers_in_coda
        assert shared.nbytes() == per_layer * (n_fixed + cfg.n_layers_in_recurrent_block)  # = a fixed-depth model
        assert per_step.nbytes() == per_layer * (n_fixed + r * cfg.n_layers_in_recurrent_block)
        core_shared = shared.nbytes() - per_layer * n_fixed
        assert per_step.nbytes() - per_layer * n_fixed == r * core_shared
    # a decode reports its cache's bytes: per-step caches are sized to the call, shared ones to the block
    res = generate(model, PROMPT, "static", max_new_tokens=4, r=8, kv_cache="per_step")
    res2 = generate(model, PROMPT, "static", max_new_tokens=4, r=8, kv_cache="shared")
    per_position = 2 * cfg.num_key_value_heads * cfg.head_dim * 4
    n_fixed = cfg.n_layers_in_prelude + cfg.n_layers_in_coda
    length = call_length(len(PROMPT) + 4)
    assert res.stats["kv_cache_bytes"] == per_position * length * (n_fixed + 8 * cfg.n_layers_in_recurrent_block)
    assert res2.stats["kv_cache_bytes"] == per_position * cache_length(model) * cfg.n_layers


def test_a_decodes_cache_bytes_do_not_depend_on_what_ran_before(load_fixture_model):
    """A kept runner with more room than a call needs is reused (recdiff.engine.runner_cache); the call still reports
    the bytes it asked for, so a trial's figure does not change with the order of the process's calls (CI once saw a
    batch report 3.4x its prompts' bytes alone)."""
    model = load_fixture_model(RAVEN_TINY)
    cases = [("static", dict(r=8, kv_cache="per_step")), ("loopspec", dict(r=8, r_draft=2)),
             ("speculative", dict(r=8, r_draft=2, kv_cache="per_step")), ("diffusion", dict(r_inner=2))]
    for name, kw in cases:
        model.__dict__.pop("_runners", None)
        fresh = generate(model, PROMPT, name, max_new_tokens=4, **kw).stats["kv_cache_bytes"]
        model.__dict__.pop("_runners", None)
        deeper = {**kw, "r": 16} if "r" in kw else {**kw, "r_inner": 4}
        generate(model, (PROMPT * 40)[:200], name, max_new_tokens=4, **deeper)  # leaves a roomier runner behind
        after = generate(model, PROMPT, name, max_new_tokens=4, **kw).stats["kv_cache_bytes"]
        assert after == fresh, (name, fresh, after)


def test_rollback_is_a_pointer_move_and_stale_entries_are_never_read(load_fixture_model):
    """Write garbage beyond the current position, then decode: results unchanged (speculative rollback and the
    diffusion wavefront rely on it), and nothing is reallocated."""
    model = load_fixture_model(RAVEN_TINY)
    cache = SlotKV(model.config, 2, 16, "shared")
    call = make_call(model.freqs_cis, torch.arange(len(PROMPT))[None], cache.length, rows=torch.tensor([0]))
    e = model.embed(torch.tensor([PROMPT]), call, cache)
    z = torch.zeros_like(e)
    for k in range(4):
        z = model.core_step(z, e, call, cache, k)
    model.decode(z, call, cache)
    ptrs = [t.data_ptr() for t in cache.k + cache.v]
    before = _decode_one(model, cache, torch.tensor([[11]]), len(PROMPT), 4)
    for t in cache.k + cache.v:
        t[:, len(PROMPT) + 1 :] = 1e3  # stale entries past the position
    torch.testing.assert_close(_decode_one(model, cache, torch.tensor([[11]]), len(PROMPT), 4), before, atol=0, rtol=0)
    assert [t.data_ptr() for t in cache.k + cache.v] == ptrs  # nothing reallocated
