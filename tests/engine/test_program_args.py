"""What every compiled call's arguments go through (:func:`recdiff.engine.program.prepare`): row-major strides, also
in size-1 dimensions (a compiled graph asserts its inputs' strides), without a copy where a view has them, and the
specialisation it keys a program on; what a caller that hands in its own specialisation is held to; and when a replay
may call inductor's generated code directly."""

from __future__ import annotations

import pytest
import torch

from recdiff import load_model
from recdiff.engine.program import MANY_ROWS, direct, prepare
from recdiff.engine.runner_cache import cache_length, get_runner
from recdiff.engine.step import Step
from tests.conftest import need_fixtures


def test_a_batch_one_slice_of_a_buffer_becomes_a_view_with_row_major_strides():
    buf = torch.randn(1, 10, 4)
    (a,), _ = prepare((buf[:, :3],))
    assert a.stride() == (12, 4, 1)
    assert a.data_ptr() == buf.data_ptr()  # no copy: the same memory
    assert torch.equal(a, buf[:, :3])


def test_a_non_contiguous_argument_is_copied_into_row_major_layout():
    buf = torch.randn(2, 10, 4)
    (a,), _ = prepare((buf[:, :3],))
    assert a.stride() == (12, 4, 1)
    assert a.data_ptr() != buf.data_ptr()
    assert torch.equal(a, buf[:, :3])


def test_dense_arguments_pass_as_they_are():
    x = torch.arange(6).view(2, 3)
    (a,), _ = prepare((x,))
    assert a is x


def test_the_signature_names_dtype_size_one_dimensions_and_the_row_class():
    few = torch.zeros(1, 3, 8)
    many = torch.zeros(2, MANY_ROWS, 8)
    ids = torch.zeros(1, 5, dtype=torch.long)
    _, sig = prepare((few, ids))
    assert sig == (False, (torch.float32, (True, False, False)), (torch.int64, (True, False)))
    _, sig = prepare((many, ids))
    assert sig[0] is True and sig[1] == (torch.float32, (False, False, False))
    # sizes other than 1 do not enter it: one graph for every width
    assert prepare((torch.zeros(1, 4, 8), ids))[1] == prepare((few, torch.zeros(1, 9, dtype=torch.long)))[1]


@pytest.mark.slow
def test_a_callers_own_signature_serves_prepares_program_and_is_held_to_it():
    """``Runner.run(..., sig=...)`` skips prepare() on the hot path; the suite checks every such call (conftest sets
    CHECK_EVERY = 1), and a caller whose arguments stray from what its signature promised fails in one line."""
    model = load_model(need_fixtures(), compile=True)
    model.engine_options["inductor"] = {"cpp_wrapper": False, "max_autotune": False, "freezing": False}
    run = get_runner(model, 1, cache_length(model))

    mix = Step(_mix)
    x, y = torch.randn(1, 3, 4), torch.randn(1, 3, 4)
    assert torch.equal(run.run(mix, (x, y), sig=("rows",))[0], x * 2 + y)
    wide = torch.randn(1, 7, 4)
    assert torch.equal(run.run(mix, (wide, wide), sig=("rows",))[0], wide * 3)
    # the program prepare() keys for these arguments: one capture serves both ways of calling
    assert torch.equal(run.run(mix, (y, x))[0], y * 2 + x)
    assert len([k for k in run.programs.compiled if k[0] == mix]) == 1
    one = torch.randn(1, 1, 4)  # a size-1 dimension the signature does not tell apart
    with pytest.raises(RuntimeError, match="signature"):
        run.run(mix, (one, one), sig=("rows",))
    assert torch.equal(run.run(mix, (one, one), sig=("one row",))[0], one * 3)
    strided = torch.randn(1, 4, 3).transpose(1, 2)  # not contiguous: prepare would copy it
    with pytest.raises(RuntimeError, match="signature"):
        run.run(mix, (strided, y), sig=("rows",))
    # static dimensions: compiled as constants (a program of its own), any row count; another width is another
    static = ((0, 2), (0, 2))
    for n in (3, 5):
        a, b = torch.randn(1, n, 4), torch.randn(1, n, 4)
        assert torch.equal(run.run(mix, (a, b), sig=("static",), static=static)[0], a * 2 + b)
    # one, keyed with its dimensions' sizes
    assert len([k for k in run.programs.compiled if k[0] == mix and len(k) == 4]) == 1
    a = torch.randn(1, 3, 6)
    assert torch.equal(run.run(mix, (a, a), sig=("static",), static=static)[0], a * 3)
    assert len([k for k in run.programs.compiled if k[0] == mix and len(k) == 4]) == 2


# ---------------------------------------------------------------------------------------------- direct calls
def _compiled(outputs, n_params=0, preserved=None):
    """A stand-in for what compile_fx returns, closures shaped as torch's: a runtime wrapper holding the graph
    module's parameters and, with frozen weights, freezing's kept indices, around a graph whose generated code
    returns ``outputs(inputs)``."""

    class Graph:
        def __init__(self) -> None:
            self.current_callable = lambda inputs: outputs(inputs)

    graph, params_buffers_flat, preserved_arg_indices = Graph(), [None] * n_params, preserved

    def inner(args):
        return graph.current_callable([args[i] for i in preserved_arg_indices] if preserved_arg_indices else args)

    def forward(*args):
        return inner([*params_buffers_flat, *args])

    return forward


def test_the_generated_code_is_called_directly_only_where_it_gives_the_captures_outputs():
    x = torch.arange(4.0)
    double = lambda inputs: [inputs[0] * 2]  # noqa: E731
    want = [x * 2]
    call = direct(_compiled(double), [x], want, [x])
    assert call is not None and torch.equal(call([x])[0], want[0])
    # frozen weights: freezing kept exactly the program's own inputs after the module's parameters
    assert direct(_compiled(double, n_params=3, preserved=[3]), [x], want, [x]) is not None
    # other values (inputs in another order), an output added (a mutated input the wrapper copies back), parameters
    # the generated code still expects, a kept subset of the inputs: the full path
    assert direct(_compiled(lambda inputs: [inputs[0] * 3]), [x], want, [x]) is None
    assert direct(_compiled(lambda inputs: [inputs[0] * 2, inputs[0]]), [x], want, [x]) is None
    assert direct(_compiled(double, n_params=2), [x], want, [x]) is None
    assert direct(_compiled(double, n_params=1, preserved=[2]), [x, x], [x * 2], [x, x]) is None
    assert direct(lambda *a: None, [x], want, [x]) is None  # no generated code found


def test_a_direct_call_must_write_its_arguments_as_the_capture_did():
    """A program may write its arguments; the check replays from copies of them as the capture found them and
    compares what it wrote with what the capture left."""
    def bump(inputs):
        inputs[0].add_(1)
        return [inputs[0] * 2]

    found = torch.arange(4.0)
    left = found + 1  # what the capture's own call left in its argument
    assert direct(_compiled(bump), [found.clone()], [left * 2], [left]) is not None
    # a generated call that writes other values (here: twice) than the capture did: the full path
    twice = lambda inputs: bump([inputs[0].add_(1)])  # noqa: E731
    assert direct(_compiled(twice), [found.clone()], [left * 2], [left]) is None


def test_a_program_that_writes_its_argument_writes_it_once_per_call():
    """The capture's own check must not write the caller's tensors a second time (a count would be off by one), and
    every replay (the generated code called directly) writes them exactly once."""
    model = load_model(need_fixtures(), compile=True)
    model.engine_options["inductor"] = {"cpp_wrapper": False, "max_autotune": False, "freezing": False}
    run = get_runner(model, 1, cache_length(model))

    count = Step(_count)
    counts, step = torch.zeros(1, 5, dtype=torch.long), torch.arange(5)[None]
    for i in range(1, 4):
        (total,) = run.run(count, (counts, step), sig=("counts",))
        assert torch.equal(counts, i * step) and total.item() == 10 * i
    prog = run.programs.vouched[(count, ("counts",), None)][0]
    assert prog.direct is not None  # the replays above took the generated code itself


def _mix(c, run, x, y):
    return (x * 2 + y,)


def _count(c, run, counts, step):
    counts.add_(step)
    return (counts.sum(1),)
