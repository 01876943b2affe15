"""What every compiled call's arguments go through (:func:`recdiff.engine.program.prepare`): row-major strides, also
in size-1 dimensions (a compiled graph asserts its inputs' strides), without a copy where a view has them, and the
specialisation it keys a program on."""

from __future__ import annotations

import torch

from recdiff.engine.program import MANY_ROWS, prepare


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
