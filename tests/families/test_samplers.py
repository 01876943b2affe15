"""Every sampler on the retrofitted families, tested by the properties that hold for Huginn (the reference runs no
adaptive, continuous-compute or diffusion generation on them: tests/fixtures/retro_tiny/README.md): a batch gives
each prompt what it gives alone (tests/matrices.py's EVERY_SAMPLER), replayed graphs give the eager tokens, the
diffusion sampler's closed-form reductions (the checks of tests/sampler_checks.py that raven_tiny's tests run too),
and statistics that add up; on one checkpoint per family whose recurrence converges (``converging`` in conftest.py).
The shared cache holds r times less core K/V than per-step caches."""

from __future__ import annotations

import json

import pytest

from recdiff import generate
from recdiff.cache import SlotKV
from tests.families.conftest import one_per_family
from tests.matrices import EVERY_SAMPLER, ids
from tests.sampler_checks import (
    check_batch_equals_alone,
    check_fixed_freeze_with_r_inner_r_is_static_ar,
    check_graph_replay_alone,
    check_graph_replay_batched,
    check_wavefront_one_is_adaptive_ar,
)


@pytest.fixture
def d(conv_dir):
    return conv_dir


# the fast tier: static and the fixed-freeze diffusion row per family (raven_tiny's fast rows cover the rest)
FAST_ROWS = {0, 6}
ROWS = [pytest.param(s, p, marks=() if i in FAST_ROWS else (pytest.mark.slow,)) for i, (s, p) in
        enumerate(EVERY_SAMPLER)]


@pytest.mark.parametrize("sampler, params", ROWS, ids=ids(EVERY_SAMPLER))
def test_batch_equals_each_prompt_alone(d, load_fixture_model, sampler, params):
    check_batch_equals_alone(d, load_fixture_model, sampler, params)


@pytest.mark.slow
def test_graph_replay_alone_gives_the_eager_tokens(d, load_fixture_model):
    check_graph_replay_alone(d, load_fixture_model)


@pytest.mark.slow
def test_graph_replay_batched_gives_the_eager_tokens(d, load_fixture_model):
    check_graph_replay_batched(d, load_fixture_model)


def test_fixed_freeze_with_r_inner_equal_r_is_static_ar(d, load_fixture_model):
    check_fixed_freeze_with_r_inner_r_is_static_ar(d, load_fixture_model)


def test_adaptive_with_wavefront_one_is_adaptive_compute_ar(d, load_fixture_model):
    check_wavefront_one_is_adaptive_ar(d, load_fixture_model, 0.03)


def test_statistics_add_up(d, load_fixture_model):
    model = load_fixture_model(d)
    p = list(json.loads((d / "prompts.json").read_text()).values())[0]
    kw = dict(max_new_tokens=8, stop_token_ids=[])
    static = generate(model, p, "static", r=8, **kw)
    assert static.stats["core_passes"] == 8 * len(static.tokens) and set(static.stats["steps_per_token"]) == {8}
    adaptive = generate(model, p, "adaptive", r=16, epsilon=0.05, **kw)
    assert adaptive.stats["core_passes"] == sum(adaptive.stats["steps_per_token"])
    assert all(1 <= s <= 16 for s in adaptive.stats["steps_per_token"])
    fixed = generate(model, p, "diffusion", r=8, r_inner=2, freeze="fixed", **kw)
    assert fixed.stats["core_passes"] == 8 + fixed.stats["steps"] * 2
    assert not fixed.stats["max_steps_reached"] and len(fixed.tokens) == 8
    # every new position but the last froze after exactly r recurrences
    assert set(fixed.stats["recurrences_per_position"][len(p): len(p) + 7]) == {8}
    spec = generate(model, p, "speculative", r=8, r_draft=2, lookahead=3, **kw)
    assert spec.tokens == static.tokens  # verification at r: what static AR at r decodes


@pytest.mark.parametrize("raw", one_per_family(), ids=lambda d: d.name)
def test_shared_cache_holds_r_times_less_core_kv(raw, load_fixture_model):
    cfg = load_fixture_model(raw).config
    per_layer = 2 * 100 * cfg.num_key_value_heads * cfg.head_dim * 4  # K and V, float32, 100 positions
    n_fixed = cfg.n_layers_in_prelude + cfg.n_layers_in_coda
    for r in (4, 16):
        shared = SlotKV(cfg, 1, 100, "shared", max_steps=r).nbytes()
        per_step = SlotKV(cfg, 1, 100, "per_step", max_steps=r).nbytes()
        assert shared == per_layer * (n_fixed + cfg.n_layers_in_recurrent_block)
        assert per_step - per_layer * n_fixed == r * (shared - per_layer * n_fixed)
