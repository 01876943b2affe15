"""Whole sampler steps replayed from graphs captured per shape: CUDA graphs, or their protocol emulated on a CPU.

A replay runs a step's kernels without Python, which removes the per-kernel launch cost that dominates batch-1
decoding on a GPU. A graph reads its inputs from static buffers (copied in before each replay) and its outputs are
its own tensors, overwritten by the next replay. :class:`EmulatedGraph` keeps that protocol without CUDA (outputs in
fixed tensors that the next call overwrites), so a caller that keeps an output too long is caught on a CPU too.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
from torch import Tensor


class Graphs:
    """The graphs of one runner, one per name and input shapes (:meth:`run`). ``wrap`` is applied to a step
    function once, before it is captured."""

    def __init__(self, emulate: bool, wrap: Callable[[Callable[..., Any]], Callable[..., Any]],
                 keeps: Callable[[Tensor], bool] = lambda t: False) -> None:
        self.cls = EmulatedGraph if emulate else Graphed
        self.wrap, self.keeps = wrap, keeps
        self.captured: dict[tuple, Graphed | EmulatedGraph] = {}

    def run(self, name: str, fn: Callable[..., Any], inputs: tuple[Tensor, ...], fixed: int = 0) -> Any:
        """``fn(*inputs)``, replayed from the graph captured for these input shapes and ``name`` (which must name
        everything else ``fn`` depends on); the first ``fixed`` inputs are the caller's own buffers, the same tensors
        at every call, which the graph reads (and ``fn`` may write) where they are, with no copy."""
        key = (name, *(tuple(t.shape) for t in inputs))
        g = self.captured.get(key)
        if g is None:
            check_held(fn, self.keeps, name)
            g = self.captured[key] = self.cls(self.wrap(fn), inputs, fixed)
        return g(*inputs)


class Graphed:
    """A captured CUDA graph with static input buffers (the first ``fixed`` are the caller's own: used as they are);
    outputs are the graph's own tensors (copy to keep)."""

    def __init__(self, fn: Callable[..., Any], inputs: tuple[Tensor, ...], fixed: int = 0) -> None:
        self.fixed = fixed
        self.inputs = [*inputs[:fixed], *(t.clone() for t in inputs[fixed:])]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up outside the graph (allocator, cuBLAS handles, autotuning), on
            # copies of the caller's buffers: the capture does not run, the first replay does (writes happen once)
            fn(*(t.clone() for t in inputs[:fixed]), *self.inputs[fixed:])
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outputs = fn(*self.inputs)

    def __call__(self, *inputs: Tensor) -> Any:
        check_fixed(self.inputs, inputs, self.fixed)
        for buf, t in zip(self.inputs[self.fixed :], inputs[self.fixed :]):
            buf.copy_(t)
        self.graph.replay()
        return self.outputs


class EmulatedGraph:
    """The CUDA-graph protocol without CUDA: static input buffers, and outputs that live in fixed tensors which
    the next replay overwrites (so code that keeps an output past the next step is caught on a CPU too)."""

    def __init__(self, fn: Callable[..., Any], inputs: tuple[Tensor, ...], fixed: int = 0) -> None:
        self.fn, self.fixed = fn, fixed
        self.inputs = [*inputs[:fixed], *(t.clone() for t in inputs[fixed:])]
        self.outputs: Any = None

    def __call__(self, *inputs: Tensor) -> Any:
        check_fixed(self.inputs, inputs, self.fixed)
        for buf, t in zip(self.inputs[self.fixed :], inputs[self.fixed :]):
            buf.copy_(t)
        out = self.fn(*self.inputs)
        if self.outputs is None:
            self.outputs = tree_map(lambda t: t.clone(), out)
        else:
            tree_map(lambda o, t: o.copy_(t), self.outputs, out)
        return self.outputs


def check_held(fn: Callable[..., Any], keeps: Callable[[Tensor], bool], name: str) -> None:
    """A graph outlives the call that captured it, and a CUDA graph reads the memory of every tensor its function
    holds (a ``functools.partial``'s arguments, a closure's cells) where it was at the capture: each must live as
    long as the graph (``keeps``), or a later replay reads freed memory. Checked at every capture, emulated too
    (an emulated graph keeps its function, and so the tensors, alive: without this a CPU would not see it)."""
    held: list[Any] = []
    while isinstance(fn, functools.partial):
        held += [*fn.args, *fn.keywords.values()]
        fn = fn.func
    held += [c.cell_contents for c in getattr(fn, "__closure__", None) or ()]
    if any(isinstance(t, Tensor) and not keeps(t) for t in held):
        raise RuntimeError(f"graph {name!r}: its function holds a tensor that does not live as long as the graph")


def check_fixed(captured: list[Tensor], inputs: tuple[Tensor, ...], fixed: int) -> None:
    """A graph's fixed inputs must be the very buffers it was captured with (it reads and writes their memory)."""
    if any(a is not b for a, b in zip(captured[:fixed], inputs)):
        raise RuntimeError("a graph's fixed inputs must be the buffers it was captured with")


def tree_map(fn: Callable[..., Tensor], tree: Any, *others: Any) -> Any:
    """``fn`` over the tensors of a nest of tuples, lists and dicts (and of ``others``, nested alike)."""
    if isinstance(tree, Tensor):
        return fn(tree, *others)
    if isinstance(tree, dict):
        return {k: tree_map(fn, v, *(o[k] for o in others)) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(tree_map(fn, v, *(o[i] for o in others)) for i, v in enumerate(tree))
    return tree
