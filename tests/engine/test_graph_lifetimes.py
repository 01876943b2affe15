"""A captured graph outlives the batch that captured it: a CUDA graph reads every tensor its function holds where
it was at the capture, so each must live as long as the graph (recdiff.engine.graphs.check_held). An emulated graph
keeps its function alive, so only this check shows the fault on a CPU (the first GPU run of the in-place diffusion
step found it as out-of-bounds gathers, a batch's row grid read after the batch was freed)."""

import functools

import pytest
import torch

from recdiff import generate, load_model
from recdiff.engine.graphs import Graphs, check_held


def test_a_tensor_the_graph_does_not_keep_is_refused_at_capture() -> None:
    kept, own = torch.zeros(3), torch.zeros(3)
    keeps = lambda t: t is kept  # noqa: E731
    check_held(functools.partial(torch.add, kept), keeps, "ok")
    check_held(lambda x: x + kept, keeps, "ok")
    with pytest.raises(RuntimeError, match="does not live as long as the graph"):
        check_held(functools.partial(torch.add, own), keeps, "partial")
    with pytest.raises(RuntimeError, match="does not live as long as the graph"):
        check_held(lambda x: x + own, keeps, "closure")


def test_every_sampler_captures_only_what_its_runner_keeps(fixture_dir) -> None:
    # two diffusion configurations one after the other on one runner, under emulated graphs: every capture checked
    model = load_model(fixture_dir)
    model.engine_options = {**model.engine_options, "emulate_graphs": True}
    for sampler, params in [("static", {"r": 8}), ("speculative", {"r": 8, "r_draft": 2, "lookahead": 2}),
                            ("diffusion", {"r": 8, "r_inner": 4, "epsilon": 0.05, "wavefront": 24}),
                            ("diffusion", {"r": 8, "r_inner": 2, "freeze": "fixed", "wavefront": 8})]:
        generate(model, [[1, 2, 3, 4, 5]], sampler, max_new_tokens=6, stop_token_ids=[], **params)
    # the checks ran: both diffusion configurations captured their model-step graphs on the one kept runner (the
    # step's constants: its rule, with every parameter, and the keys)
    captured = [key[0] for run in model.__dict__["_runners"].values() for key in run.graphs.captured]
    steps = [st.c[0] if st.fn.__name__ == "_into" else st for st in captured]  # written into the runner's buffers
    rules = {repr(st.c[0]) for st in steps if st.fn.__name__ == "model_step"}
    assert len(rules) == 2, captured


def test_a_replay_poisons_the_outputs_of_graphs_captured_after_it() -> None:
    """A runner's graphs share one memory pool (recdiff/engine/graphs.py): a graph captured later may hold its outputs
    where an earlier graph keeps its intermediates. The emulation makes that worst case happen: replaying a graph
    overwrites the outputs of every graph captured after it, never those of one captured before."""
    graphs = Graphs(emulate=True, wrap=lambda fn: fn)
    x = torch.ones(2)
    first = graphs.run("first", lambda x: (x * 2, (x > 0).long()), (x,))
    second = graphs.run("second", lambda x: (x * 3,), (x,))
    assert first[0].tolist() == [2.0, 2.0] and second[0].tolist() == [3.0, 3.0]
    graphs.run("second", lambda x: (x * 3,), (x + 1,))
    assert first[0].tolist() == [2.0, 2.0] and first[1].tolist() == [1, 1]  # captured before: kept
    graphs.run("first", lambda x: (x * 2, (x > 0).long()), (x,))
    assert torch.isnan(second[0]).all()  # captured after: poisoned
    assert first[0].tolist() == [2.0, 2.0]
    ints = graphs.run("third", lambda x: (x.long(),), (x,))
    graphs.run("second", lambda x: (x * 3,), (x,))
    assert ints[0].tolist() == [torch.iinfo(torch.long).min] * 2
