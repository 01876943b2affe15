"""Whole sampler steps replayed from graphs captured per shape: CUDA graphs, or their protocol emulated on a CPU.

A replay runs a step's kernels without Python, which removes the per-kernel launch cost that dominates batch-1
decoding on a GPU. A graph reads its inputs from static buffers (copied in before each replay) and its outputs are
its own tensors. A runner's graphs share one memory pool: a graph's intermediates are freed at the end of its
capture, and a graph captured later may place its outputs there, so replaying a graph overwrites its own outputs and
may overwrite those of every graph captured after it (a graph's outputs are valid until the runner's next replay).
Without the shared pool each graph kept its own intermediates for life, logits among them: one pool per step shape
(wavefront width × key count) took gigabytes at batch 32. :class:`EmulatedGraph` keeps that protocol without CUDA
(each replay overwrites its own outputs and poisons those of the graphs captured after it), so a caller that keeps
an output too long is caught on a CPU too.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Hashable

import torch
from torch import Tensor


class Graphs:
    """The graphs of one runner, one per step, input shapes and dtypes and fixed buffers (:meth:`run`). ``wrap`` is
    applied to a step function once, before it is captured."""

    def __init__(self, emulate: bool, wrap: Callable[[Callable[..., Any]], Callable[..., Any]],
                 keeps: Callable[[Tensor], bool] = lambda t: False) -> None:
        self.emulate, self.wrap, self.keeps = emulate, wrap, keeps
        self.captured: dict[tuple, Graphed | EmulatedGraph] = {}  # in capture order (a replay may overwrite the later)
        self.pool: Any = None  # the CUDA memory pool every graph of this runner is captured into

    def run(self, st: Hashable, fn: Callable[..., Any], inputs: tuple[Tensor, ...], fixed: int = 0) -> Any:
        """``fn(*inputs)``, replayed from the graph captured for the step ``st`` (whose key names everything else
        ``fn`` depends on: :mod:`recdiff.engine.step`) with inputs of these shapes and dtypes; the first ``fixed``
        inputs are the caller's own buffers, the same tensors at every call, which the graph reads (and ``fn`` may
        write) where they are, with no copy: where they are is part of the key, so other buffers (another setting's
        state of another shape, say) get a graph of their own."""
        key = (st, *((t.shape, t.dtype) for t in inputs), *(_where(t) for t in inputs[:fixed]))
        g = self.captured.get(key)
        if g is None:
            check_held(fn, self.keeps, st)
            if self.emulate:
                g = EmulatedGraph(self.wrap(fn), inputs, fixed, later=self.captured)
            else:
                if self.pool is None:
                    self.pool = torch.cuda.graph_pool_handle()
                g = Graphed(self.wrap(fn), inputs, fixed, self.pool)
            self.captured[key] = g
        return g(*inputs)


class Graphed:
    """A captured CUDA graph with static input buffers (the first ``fixed`` are the caller's own: used as they are);
    outputs are the graph's own tensors (copy to keep). ``pool``: a memory pool shared with other graphs (the module's
    docstring says what that asks of a caller)."""

    def __init__(self, fn: Callable[..., Any], inputs: tuple[Tensor, ...], fixed: int = 0, pool: Any = None) -> None:
        self.fixed = fixed
        self.inputs = [*inputs[:fixed], *(t.clone() for t in inputs[fixed:])]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up outside the graph (allocator, cuBLAS handles, autotuning), on
            # copies of the caller's buffers: the capture does not run, the first replay does (writes happen once)
            fn(*(t.clone() for t in inputs[:fixed]), *self.inputs[fixed:])
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            self.outputs = fn(*self.inputs)

    def __call__(self, *inputs: Tensor) -> Any:
        for buf, t in zip(self.inputs[self.fixed :], inputs[self.fixed :]):
            buf.copy_(t)
        self.graph.replay()
        return self.outputs


class EmulatedGraph:
    """The CUDA-graph protocol without CUDA: static input buffers, and outputs that live in fixed tensors which
    the next replay overwrites; a replay also poisons the outputs of every graph captured after it (``later``: the
    runner's graphs in capture order, this one added next), as a shared pool may place them in this graph's
    intermediates. So code that keeps an output past the runner's next replay is caught on a CPU too."""

    def __init__(self, fn: Callable[..., Any], inputs: tuple[Tensor, ...], fixed: int = 0,
                 later: dict[tuple, Any] | None = None) -> None:
        self.fn, self.fixed = fn, fixed
        self.inputs = [*inputs[:fixed], *(t.clone() for t in inputs[fixed:])]
        self.outputs: Any = None
        self.order, self.index = later, len(later) if later is not None else 0

    def __call__(self, *inputs: Tensor) -> Any:
        for buf, t in zip(self.inputs[self.fixed :], inputs[self.fixed :]):
            buf.copy_(t)
        for g in list((self.order or {}).values())[self.index + 1 :]:
            if g.outputs is not None:
                tree_map(poison, g.outputs)
        out = self.fn(*self.inputs)
        if self.outputs is None:
            self.outputs = tree_map(lambda t: t.clone(), out)
        else:
            tree_map(lambda o, t: o.copy_(t), self.outputs, out)
        return self.outputs


def poison(t: Tensor) -> Tensor:
    """Overwrite ``t`` with values no step computes: NaN for floats, the most negative value for integers (an index
    that fails where it is used)."""
    return t.fill_(float("nan") if t.is_floating_point() else torch.iinfo(t.dtype).min if t.dtype != torch.bool
                   else True)


def check_held(fn: Callable[..., Any], keeps: Callable[[Tensor], bool], name: Any) -> None:
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


def _where(t: Tensor) -> tuple:
    """Where a fixed input is: a graph reads and writes it there (the same buffer, or the same view of it)."""
    return t.data_ptr(), t.shape, t.stride(), t.dtype, t.device


def tree_map(fn: Callable[..., Tensor], tree: Any, *others: Any) -> Any:
    """``fn`` over the tensors of a nest of tuples, lists and dicts (and of ``others``, nested alike)."""
    if isinstance(tree, Tensor):
        return fn(tree, *others)
    if isinstance(tree, dict):
        return {k: tree_map(fn, v, *(o[k] for o in others)) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(tree_map(fn, v, *(o[i] for o in others)) for i, v in enumerate(tree))
    return tree
