"""The GPU path, exercised on a CPU as far as it can be: the CUDA-graph replay protocol (static input buffers,
outputs overwritten by the next replay) and bfloat16, batched, for every sampler (compiled pieces are checked in
float32 by test_compile.py; bf16 is the same code at another dtype, so it runs eager here to keep CI short)."""

from __future__ import annotations

import pytest
import torch

from recdiff import generate, load_model
from tests.conftest import RAVEN_TINY
from tests.matrices import ONE_PER_SAMPLER, prompts
from tests.sampler_checks import check_graph_replay_alone, check_graph_replay_batched

pytestmark = pytest.mark.slow


def test_graph_replay_protocol_on_cpu(load_fixture_model):
    """``emulate_graphs`` runs the CUDA-graph path (whole steps replayed from static buffers whose outputs the next
    replay overwrites) on a CPU: the tokens are the eager ones (the families' checkpoints: tests/families)."""
    check_graph_replay_batched(RAVEN_TINY, load_fixture_model)


def test_bfloat16_runs_every_sampler_batched_close_to_float32(load_fixture_model):
    """The GPU's dtype on a CPU: bf16 weights and cache, norms/RoPE/softmax/δ in float32 as in the eager path."""
    fp32 = load_fixture_model(RAVEN_TINY)
    bf16 = load_model(RAVEN_TINY, dtype="bfloat16")
    assert next(bf16.parameters()).dtype == torch.bfloat16
    ps = prompts(RAVEN_TINY)
    same = total = 0
    for sampler, params in ONE_PER_SAMPLER:
        want = generate(fp32, ps, sampler, max_new_tokens=10, stop_token_ids=[], **params)
        got = generate(bf16, ps, sampler, max_new_tokens=10, stop_token_ids=[], batch_size=len(ps), **params)
        for a, b in zip(want, got):
            assert len(b.tokens) == len(a.tokens)
            same += sum(x == y for x, y in zip(a.tokens, b.tokens))
            total += len(a.tokens)
    assert same / total >= 0.9, f"bf16 agrees with fp32 on {same}/{total} positions"


def test_graph_replay_with_state_noise_on_cpu(load_fixture_model):
    """β > 0 with α > 0 draws noise for every wavefront row; under CUDA graphs a step runs a power-of-two width
    above the widest wavefront, and the noise is padded to it (zeros past each slot's own rows): the tokens are the
    eager ones (with headway 2 and continuous compute as well)."""
    eager = load_fixture_model(RAVEN_TINY)
    graphed = load_model(RAVEN_TINY)
    graphed.engine_options["emulate_graphs"] = True
    params = {"r": 8, "r_inner": 2, "epsilon": 0.05, "wavefront": 6, "headway": 2, "beta": 0.3, "init_scale": 0.5,
              "eta": 0.2, "continuous_compute": True}
    ps = prompts(RAVEN_TINY)
    want = [generate(eager, p, "diffusion", max_new_tokens=10, stop_token_ids=[], **params).tokens for p in ps]
    got = generate(graphed, ps, "diffusion", max_new_tokens=10, stop_token_ids=[], batch_size=3, **params)
    assert [r.tokens for r in got] == want


def test_graph_replay_alone_gives_the_eager_tokens(load_fixture_model):
    """Every prompt alone through the replayed graphs (a decode loop replays one graph over and over, its input
    buffers the same tensors with the next positions in them): the eager tokens, for every sampler (on raven_tiny;
    the families' folders in tests/families/test_samplers.py)."""
    check_graph_replay_alone(RAVEN_TINY, load_fixture_model)
