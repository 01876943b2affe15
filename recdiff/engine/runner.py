"""The model runner: one batched model call over fixed-shape buffers; the only part that is compiled or captured.

A :class:`Runner` owns a :class:`~recdiff.cache.SlotKV` of ``slots`` rows × ``length`` positions and runs the
model's three pieces (P, one recurrence of R, C) for a batch of rows at given absolute positions. It holds no
policy: samplers (``recdiff/samplers``) decide what to run; the scheduler (:mod:`recdiff.engine.scheduler`) decides
which sequence sits in which row.

How a call runs (``model.engine_options``, set by ``recdiff.load_model(..., compile=...)``):

- eager (default): plain PyTorch.
- CPU, ``compile=True``: the decoding calls (P, one recurrence of R, C at the fixed shape ``slots × rows`` of a
  sampler step) are compiled with ``torch.compile`` (inductor, static shapes). A run meets a handful of shapes
  (the diffusion sampler rounds its wavefront up to a power of two), each compiled once per process; prompts
  prefill eagerly, so their lengths never cause a compilation.
- CUDA, ``compile=True``: whole sampler steps (P, r or r' recurrences, C) are captured as CUDA graphs per shape and
  replayed (:meth:`Runner.graphed`), which removes the per-kernel launch cost that dominates batch-1 decoding.

Runners are cached per model and shape, so warm-up is paid once per process, not per prompt.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor

from recdiff.cache import Call, SlotKV, make_call
from recdiff.model import RecurrentDepthModel, rope_table


def set_compile(model: RecurrentDepthModel, compile: bool) -> None:
    """Switch how the engine runs ``model`` (what ``recdiff.load_model(..., compile=...)`` sets)."""
    model.engine_options = {**model.engine_options, "compile": bool(compile)}


# torch.compile keeps its graphs per function: the engine's static shapes (a few per sampler and trial, each
# compiled once) must all fit, or dynamo would fall back to eager after its default limit of 8
torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 256)


class Compiled:
    """``fn`` compiled by inductor for one static shape. Each instance has a code object of its own, so dynamo
    keeps exactly one graph for it; after the first call its guards are skipped (``skip_guard_eval_unsafe``), which
    is sound because the runner keys instances by every shape and option they depend on, and it removes a guard check
    over every weight and cache tensor from each call (tens of microseconds, comparable to a tiny model's layer)."""

    def __init__(self, fn: Callable, name: str) -> None:
        def piece(*args: Any) -> Any:
            return fn(*args)

        piece.__code__ = piece.__code__.replace(co_name=name)
        self.fn = torch.compile(piece, dynamic=False, fullgraph=True)
        self.warm = False

    def __call__(self, *args: Any) -> Any:
        if not self.warm:
            out = self.fn(*args)
            self.warm = True
            return out
        with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
            return self.fn(*args)


def _dense(t: Tensor) -> Tensor:
    """``t`` with row-major strides, also in size-1 dimensions (which ``contiguous()`` leaves as they are and
    compiled code guards on)."""
    strides, n = [], 1
    for size in reversed(t.shape):
        strides.append(n)
        n *= size
    if t.stride() == tuple(reversed(strides)):
        return t
    return torch.empty(t.shape, dtype=t.dtype, device=t.device).copy_(t)


def compiled(fn: Callable, key: tuple, store: dict) -> Callable:
    """``fn`` compiled for one static shape (inductor), kept in ``store`` under ``key``."""
    if key not in store:
        store[key] = Compiled(fn, f"recdiff_piece_{len(store)}")
    return store[key]


def cache_length(model: RecurrentDepthModel, needed: int) -> int:
    """Positions per slot: the positions needed, rounded up to a power of two (at least 64, at most the block).
    Attention reads every position of a slot, masked, so a short run must not pay for the whole block; keys past a
    query's position are masked exactly (a longer cache gives bit-identical results), so runs share runners."""
    return min(model.config.block_size, max(64, 1 << (needed - 1).bit_length()))


class Runner:
    def __init__(self, model: RecurrentDepthModel, slots: int, length: int, policy: str = "shared",
                 max_steps: int = 1) -> None:
        p = next(model.parameters())
        self.model, self.slots, self.length, self.policy = model, slots, length, policy
        self.device, self.dtype = p.device, p.dtype
        self.cache = SlotKV(model.config, slots, length, policy, max_steps, device=p.device, dtype=p.dtype)
        cfg = model.config
        # positions past the block only ever hold padding rows (a wavefront padded to its bucket); give them angles
        self.freqs = model.freqs_cis if length <= cfg.block_size else rope_table(cfg.head_dim, length, cfg.rope_base).to(p.device)
        compile = bool(model.engine_options.get("compile"))
        # CPU: decoding calls compiled per static shape (per_step caches index their slots by step, so stay eager)
        self.compile_pieces = compile and p.device.type == "cpu" and policy == "shared"
        self._compiled: dict[tuple, Callable] = {}
        # whole steps replayed from graphs: CUDA graphs when compiling on a GPU; "emulate_graphs" replays the same
        # static-buffer protocol without CUDA, so the graph path's bookkeeping is tested on a CPU
        emulate = bool(model.engine_options.get("emulate_graphs"))
        self.cuda_graphs = policy == "shared" and (emulate or (compile and p.device.type == "cuda"))
        # static shapes: steps whose width varies (the diffusion wavefront) round it up to a power of two
        self.static_shapes = self.cuda_graphs or self.compile_pieces

        self._graph_cls = _EmulatedGraph if emulate else _Graphed
        self._graphs: dict[Any, _Graphed] = {}
        self.rows_all = torch.arange(slots, device=p.device)

    @classmethod
    def get(cls, model: RecurrentDepthModel, slots: int, length: int, policy: str = "shared", max_steps: int = 1) -> "Runner":
        """The cached runner of this shape (one per process: compiled graphs and buffers are reused)."""
        steps = max_steps if policy == "per_step" else 1
        compile = bool(model.engine_options.get("compile"))
        runners = model.__dict__.setdefault("_runners", {})
        # any runner of this kind with room enough serves (its graphs are compiled already)
        fits = [k for k in runners if k[0] == slots and k[2:] == (policy, steps, compile) and k[1] >= length]
        if fits:
            return runners[min(fits, key=lambda k: k[1])]
        key = (slots, length, policy, steps, compile)
        if len(runners) >= 4:  # keep memory bounded when many shapes pass through one process
            runners.pop(next(iter(runners)))
        runners[key] = cls(model, *key[:4])
        return runners[key]

    # ------------------------------------------------------------------------------------------ calls
    def call(self, pos: Tensor, rows: Tensor | None = None, write: Tensor | None = None,
             keys: int | None = None) -> Call:
        """A call at positions ``pos`` that attends to the first ``keys`` cache positions (default: all); every
        query position must be below ``keys``."""
        return make_call(self.freqs, pos, keys or self.length, rows, write)

    def keys(self, needed: int) -> int:
        """Cache positions a step attends to: ``needed`` (its furthest query position + 1) rounded up, to a power of
        two under static shapes (a few compiled shapes), else to a multiple of 64; at most the cache. Keys past a
        query's position are masked exactly, so this only saves work: results are bit-identical."""
        n = max(64, 1 << (needed - 1).bit_length()) if self.static_shapes else -(-needed // 64) * 64
        return min(self.length, n)

    def _piece(self, name: str, fn: Callable, call: Call, *args: Any) -> Any:
        """A model piece for this call: compiled for the call's static shape when decoding on a CPU with
        ``compile``; eager for prefills (``call.rows`` set: one sequence's prompt, of any length)."""
        if not self.compile_pieces or call.rows is not None:
            return fn(*args, call, self.cache)
        args = tuple(_dense(a) for a in args)  # one layout per shape (a slice of a buffer has other strides)
        key = (name, tuple(call.mask.shape), call.write is None, *(tuple(a.shape) for a in args))
        return compiled(fn, key, self._compiled)(*args, call, self.cache)

    def embed(self, ids: Tensor, call: Call) -> Tensor:
        return self._piece("embed", self.model.embed, call, ids)

    def core(self, z: Tensor, e: Tensor, call: Call, step: int = 0) -> Tensor:
        if self.policy == "per_step":
            return self.model.core_step(z, e, call, self.cache, step)
        # under `shared` every recurrence uses the same cache slots: step 0, so compiled code never specialises
        return self._piece("core", self.model.core_step, call, z, e)

    def decode(self, z: Tensor, call: Call) -> Tensor:
        return self._piece("decode", self.model.decode, call, z)

    def recur(self, ids: Tensor, pos: Tensor, r: int, z: Tensor | None = None, rows: Tensor | None = None,
              keys: int | None = None) -> Tensor:
        """P, r recurrences from ``z`` (zeros when None), C → logits ``(B, T, V)`` (static depth: no decisions)."""
        call = self.call(pos, rows, keys=keys)
        e = self.embed(ids, call)
        if z is None:
            z = torch.zeros_like(e)
        for k in range(r):
            z = self.core(z, e, call, k)
        return self.decode(z, call)

    def width(self, needed: int, most: int) -> int:
        """Rows of a step that needs ``needed`` (≤ ``most``): the power of two above it under static shapes."""
        return min(most, 1 << (needed - 1).bit_length()) if self.static_shapes else needed

    # ------------------------------------------------------------------------------------------ CUDA graphs
    def graphed(self, name: str, fn: Callable[..., Any], *inputs: Tensor) -> Any:
        """``fn(*inputs)``, replayed from a CUDA graph captured for these input shapes (and ``name``, which must
        name everything else ``fn`` depends on) when this runner uses CUDA graphs; a plain call otherwise."""
        if not self.cuda_graphs:
            return fn(*inputs)
        key = (name, *(tuple(t.shape) for t in inputs))
        g = self._graphs.get(key)
        if g is None:
            g = self._graphs[key] = self._graph_cls(fn, inputs)
        return g(*inputs)


class _Graphed:
    """A captured CUDA graph with static input buffers; outputs are the graph's own tensors (copy to keep)."""

    def __init__(self, fn: Callable[..., Any], inputs: tuple[Tensor, ...]) -> None:
        self.inputs = [t.clone() for t in inputs]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up outside the graph (allocator, cuBLAS handles, autotuning)
            fn(*self.inputs)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outputs = fn(*self.inputs)

    def __call__(self, *inputs: Tensor) -> Any:
        for buf, t in zip(self.inputs, inputs):
            buf.copy_(t)
        self.graph.replay()
        return self.outputs


class _EmulatedGraph:
    """The CUDA-graph protocol without CUDA: static input buffers, and outputs that live in fixed tensors which
    the next replay overwrites (so code that keeps an output past the next step is caught on a CPU too)."""

    def __init__(self, fn: Callable[..., Any], inputs: tuple[Tensor, ...]) -> None:
        self.fn, self.inputs = fn, [t.clone() for t in inputs]
        self.outputs: Any = None

    def __call__(self, *inputs: Tensor) -> Any:
        for buf, t in zip(self.inputs, inputs):
            buf.copy_(t)
        out = self.fn(*self.inputs)
        if self.outputs is None:
            self.outputs = torch.utils._pytree.tree_map(lambda t: t.clone(), out)
        else:
            torch.utils._pytree.tree_map(lambda o, t: o.copy_(t), self.outputs, out)
        return self.outputs
