"""CUDA graphs (``compile=True`` on a GPU: whole sampler steps captured per shape and replayed) give the eager
tokens and statistics on the same inputs, and a warmed-up model captures no graph over 50 prompts of different
lengths, alone and batched."""

from __future__ import annotations

import pytest
import torch

from recdiff import generate, warm_up
from recdiff.engine import graphs
from tests.conftest import RAVEN_TINY, need_fixtures
from tests.gpu.common import EMULATE, check_graphs_match_eager, load, needs_cuda
from tests.matrices import EVERY_SAMPLER, ONE_PER_SAMPLER, ids, prompts

pytestmark = needs_cuda


@pytest.mark.parametrize("sampler, params", EVERY_SAMPLER, ids=ids(EVERY_SAMPLER))
def test_graphs_give_the_eager_tokens_and_stats(fixture_dir, models, sampler, params):
    check_graphs_match_eager(fixture_dir, models, sampler, params)


@pytest.fixture()
def captures(monkeypatch):
    """Counts CUDA-graph captures (every ``graphs.Graphed`` made; emulated: every ``graphs.EmulatedGraph``)."""
    count = [0]
    cls = graphs.EmulatedGraph if EMULATE else graphs.Graphed
    init = cls.__init__

    def counted(self, *args, **kwargs):
        count[0] += 1
        init(self, *args, **kwargs)

    monkeypatch.setattr(cls, "__init__", counted)
    return count


@pytest.mark.parametrize("sampler, params", ONE_PER_SAMPLER, ids=[s for s, _ in ONE_PER_SAMPLER])
def test_no_graph_is_captured_after_warm_up_across_50_prompt_lengths(captures, sampler, params):
    """``recdiff.warm_up`` (the shortest and the longest prompt, alone and through every kind of admission), then 50
    prompts of 3 to 19 tokens alone and in batches of 4: every shape they meet was captured in the warm-up (widths
    and key counts are rounded up to powers of two)."""
    model = load(need_fixtures(), compile=True)  # a model of its own: every graph it has, it captured here
    ps = prompts(RAVEN_TINY, 50)
    assert len({len(p) for p in ps}) >= 15
    kw = dict(max_new_tokens=10, stop_token_ids=[], **params)
    warm_up(model, ps, sampler, batch_size=4, **kw)
    before = captures[0]
    if sampler != "adaptive":  # adaptive compute decides after every recurrence: it runs eagerly, nothing to capture
        assert before > 0, "the warm-up captured no graph: this test counts nothing"
    for p in ps:
        generate(model, p, sampler, **kw)
    generate(model, ps, sampler, batch_size=4, **kw)
    assert captures[0] == before, f"{sampler}: {captures[0] - before} graph(s) captured after the warm-up"


def test_a_graphs_fixed_inputs_are_read_and_written_where_they_are():
    """``Runner.step(..., fixed=n)``: the first n inputs are the caller's buffers, used by the graph as they are. A
    write to one lands in the caller's tensor once per call (the capture's warm-up writes copies), the other inputs
    are copied in at each replay, and another tensor in a fixed input's place fails."""
    cls = graphs.EmulatedGraph if EMULATE else graphs.Graphed
    dev = "cpu" if EMULATE else "cuda"
    state, x = torch.zeros(3, device=dev), torch.ones(3, device=dev)

    def fn(state, x):
        state.add_(x)
        return (state * 2,)

    g = cls(fn, (state, x), 1)
    for i in range(1, 4):
        (out,) = g(state, x * i)
        assert state.tolist() == [i * (i + 1) / 2] * 3 and out.tolist() == [i * (i + 1)] * 3
    with pytest.raises(RuntimeError, match="fixed"):
        g(state.clone(), x)
