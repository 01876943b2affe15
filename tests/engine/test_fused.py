"""Fused elementwise kernels (recdiff/fused.py): each fused function traces whole (no graph break: it would run as
an eager island inside a captured graph) for every shape a step meets, and a model running them computes what the
plain model computes. Traced here with dynamo's "eager" backend (the very graphs inductor would compile, executed
by torch's own ops: exact on a CPU); inductor's kernels themselves run on a GPU (tests/gpu: graphs against eager)."""

from __future__ import annotations

import pytest
import torch

from recdiff import fused, generate
from recdiff.model import RMSNorm
from tests.conftest import RAVEN_TINY, need_fixtures
from tests.matrices import prompts


@pytest.mark.slow
def test_a_fused_model_gives_the_plain_tokens_and_logits(monkeypatch, load_fixture_model):
    monkeypatch.setattr(fused, "BACKEND", "eager")
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 64)  # as fused.available sets on CUDA
    fused.compiled.cache_clear()
    torch._dynamo.reset()
    plain = load_fixture_model(need_fixtures())
    model = type(plain)(plain.config)
    model.load_state_dict(plain.state_dict())
    model.eval().requires_grad_(False)
    model.engine_options = dict(plain.engine_options)
    model.set_fused(True)
    try:
        ids = torch.tensor([prompts(RAVEN_TINY)[0]])
        assert torch.equal(model(ids, r=4)[0], plain(ids, r=4)[0])
        ps = prompts(RAVEN_TINY)[:3]
        for sampler, params in (("static", {"r": 8}),
                                ("diffusion", {"r": 16, "r_inner": 4, "epsilon": 0.05, "wavefront": 24})):
            kw = dict(max_new_tokens=6, stop_token_ids=[], batch_size=len(ps), **params)
            want, got = generate(plain, ps, sampler, **kw), generate(model, ps, sampler, **kw)
            assert [r.tokens for r in got] == [r.tokens for r in want], sampler
            assert [r.stats for r in got] == [r.stats for r in want], sampler
        # every fused function ran compiled: the norms with and without a residual, RoPE with the bias, the gate
        assert fused.compiled.cache_info().currsize == 3
    finally:
        fused.compiled.cache_clear()
        torch._dynamo.reset()


def test_a_norm_adds_its_residual_first():
    norm = RMSNorm(6, 1e-6)
    x, res = torch.randn(2, 3, 6), torch.randn(2, 3, 6)
    assert torch.equal(norm(x, res), norm(x + res))


def test_fusing_is_for_cuda_only():
    assert not fused.available("cpu")
