"""Reductions of the diffusion sampler (paper Sections 3.3-3.5), seeded sampling, stops, traces."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from recdiff import DiffusionTrace, generate, load_model
from recdiff.model import relative_change
from tests.conftest import RAVEN_TINY
from tests.sampler_checks import check_fixed_freeze_with_r_inner_r_is_static_ar, check_wavefront_one_is_adaptive_ar


def _prompts(d):
    return list(json.loads((d / "prompts.json").read_text()).values())


def test_fixed_freeze_with_r_inner_equal_r_is_static_ar(fixture_dir, load_fixture_model):
    check_fixed_freeze_with_r_inner_r_is_static_ar(fixture_dir, load_fixture_model)


@pytest.mark.parametrize("epsilon", [pytest.param(e, marks=pytest.mark.slow) for e in (0.03, 0.01)])
def test_adaptive_with_wavefront_one_is_adaptive_compute_ar(fixture_dir, load_fixture_model, epsilon):
    check_wavefront_one_is_adaptive_ar(fixture_dir, load_fixture_model, epsilon)


def _contractive(d):
    """The checkpoint with the adapter's state columns scaled down: R becomes a contraction in s."""
    model = load_model(d)
    with torch.no_grad():
        model.transformer.adapter.weight[:, : model.config.n_embd] *= 0.3
    return model


@pytest.mark.slow
def test_tiny_epsilon_and_large_wavefront_converge_to_static_ar(fixture_dir):
    model = _contractive(fixture_dir)
    for prompt in _prompts(fixture_dir):
        e = model.embed(torch.tensor([prompt]))
        s, deltas = torch.zeros_like(e), []
        for _ in range(48):
            s_new = model.core_step(s, e)
            deltas.append(relative_change(s_new, s).max().item())
            s = s_new
        assert deltas[-1] < 1e-5 < deltas[1]  # it is a contraction, but not a trivial one
        static = generate(model, prompt, "static", max_new_tokens=16, r=64)
        diff = generate(model, prompt, "diffusion", max_new_tokens=16, r=64, r_inner=4, epsilon=1e-5, wavefront=64,
                        eta=0.0)
        assert not diff.stats["max_steps_reached"]
        assert diff.tokens == static.tokens


def test_sampling_is_seeded_and_top_p_restricts(load_fixture_model):
    model = load_fixture_model(RAVEN_TINY)
    prompt = [3, 256, 452]
    for sampler, kw in [("static", {"r": 4}), ("diffusion", {"r": 8, "r_inner": 2})]:
        a = generate(model, prompt, sampler, max_new_tokens=10, temperature=1.0, seed=7, **kw)
        b = generate(model, prompt, sampler, max_new_tokens=10, temperature=1.0, seed=7, **kw)
        c = generate(model, prompt, sampler, max_new_tokens=10, temperature=1.0, seed=8, **kw)
        assert a.tokens == b.tokens != c.tokens
    # top_p tiny keeps only the top token: sampling equals greedy
    greedy = generate(model, prompt, "static", max_new_tokens=10, r=4)
    nucleus = generate(model, prompt, "static", max_new_tokens=10, r=4, temperature=5.0, top_p=1e-6, seed=3)
    assert nucleus.tokens == greedy.tokens


def test_stop_tokens_end_every_sampler(load_fixture_model):
    model = load_fixture_model(RAVEN_TINY)
    prompt = [283, 363, 510, 220]
    full = generate(model, prompt, "static", max_new_tokens=16, r=32).tokens
    stop = full[5]
    cut = full[: full.index(stop) + 1]
    for sampler, kw in [("static", {}), ("adaptive", {"epsilon": 1e-9}), ("speculative", {}),
                        ("diffusion", {"freeze": "fixed", "r_inner": 32, "eta": 0.0})]:
        res = generate(model, prompt, sampler, max_new_tokens=16, r=32, stop_token_ids=[stop], **kw)
        assert res.tokens == cut, sampler
        assert res.stopped_by == "stop_token"


def test_step_cap_ends_with_a_flag(load_fixture_model):
    model = load_fixture_model(RAVEN_TINY)
    res = generate(model, [1, 2, 3], "diffusion", max_new_tokens=24, epsilon=1e-12, max_steps=20)
    assert res.stats["max_steps_reached"] and res.stats["steps"] == 20 and res.stopped_by == "max_steps"
    # nothing froze (ε unreachable): the tokens are the first token and the 20 unfrozen proposals, flagged
    assert len(res.tokens) == 21 and res.stats["unfrozen_tokens"] == 20
    default = generate(model, [1, 2, 3], "diffusion", max_new_tokens=4, r=8, r_inner=4, epsilon=1e-12)
    assert default.stats["max_steps_reached"] and default.stats["steps"] == 4 * 4 * 2  # 4·N·⌈r/r'⌉


@pytest.mark.slow
def test_headway_wavefront_noise_knobs(load_fixture_model, tmp_path):
    model = load_fixture_model(RAVEN_TINY)
    base = dict(max_new_tokens=12, r=8, r_inner=2, trace=True)
    res = generate(model, [5, 6, 7], "diffusion", headway=3, wavefront=6, beta=0.3, beta_schedule="linear",
                   init_scale=1.0, continuous_compute=True, **base)
    tr = res.trace
    assert len(res.tokens) == 12 and res.stats["standing_waves"] > 0
    widths = (tr.tokens >= 0).sum(1) - (tr.frozen - 1)
    assert widths.max() <= 6 + 1
    pad = generate(model, [5, 6, 7], "diffusion", headway=3, pad_id=0, **base).trace
    assert (pad.tokens[0, 5:7] == 0).all()  # prompt 0-2, first token 3, proposal 4, headway extras 5-6 = pad
    # the trace round-trips through .npz, compactly typed
    path = tr.save(tmp_path / "t.npz")
    back = DiffusionTrace.load(path)
    assert back.tokens.dtype == np.int32 and back.delta.dtype == np.float16
    np.testing.assert_array_equal(back.tokens, tr.tokens)
    np.testing.assert_array_equal(back.frozen, tr.frozen)
    # frozen_at_step is monotone and covers every new token
    assert sorted(res.stats["frozen_at_step"]) == res.stats["frozen_at_step"]
    assert len(res.stats["frozen_at_step"]) == 12


def test_init_state_is_a_truncated_normal_drawn_without_host_reads(load_fixture_model):
    """InitState(α): N(0, (α·σ)²) truncated to ±3 std, times the embed scale, from the given stream; the draw never
    reads a value back (torch 2.13's trunc_normal_ does, once per rejection round)."""
    from recdiff.tools.profile import profiling

    model = load_fixture_model(RAVEN_TINY)

    class Draw:
        def step(self):
            return model.initial_state(torch.zeros((4, 5000, 8)), 2.0, torch.Generator().manual_seed(1))

    with profiling([Draw]) as prof:
        x = Draw().step()
    assert prof.step_reads == 0
    std = float(model.config.init_values["std"]) * 2.0 * model.config.embed_scale
    assert abs(x.abs().max().item() - 3 * std) < 0.01 * std  # the bounds are reached, never passed
    assert abs(x.std().item() / std - 0.98658) < 0.01  # a normal truncated at 3 std: std factor sqrt(0.97334)
    assert abs(x.mean().item()) < 0.01 * std
    again = model.initial_state(torch.zeros((4, 5000, 8)), 2.0, torch.Generator().manual_seed(1))
    assert torch.equal(x, again)
