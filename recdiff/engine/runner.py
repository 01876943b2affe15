"""The model runner: batched model calls over fixed buffers; the only part that is compiled or captured.

A :class:`Runner` owns a :class:`~recdiff.cache.SlotKV` of ``slots`` rows × ``length`` positions and runs the
model's pieces (P, recurrences of R, C: :mod:`recdiff.engine.pieces`) for a batch of rows at given absolute
positions. It holds no policy: the samplers (``recdiff/samplers``) decide what to run, how many recurrences and
when a sequence stops or freezes (an exit piece applies the ε the sampler gives, as a tensor op over the rows; the
sampler decides when to stop calling it); the scheduler (:mod:`recdiff.engine.scheduler`) decides which sequence
sits in which row. Runners are kept per model and shape (:mod:`recdiff.engine.runner_cache`).

Every piece runs in one of three ways (``model.engine_options``, set by :func:`set_compile`):

- eager (default): plain PyTorch.
- CPU, ``compile=True``: each piece is a compiled :class:`~recdiff.engine.program.Program` (picked per call by
  :class:`~recdiff.engine.program.Programs`), compiled by inductor once per specialisation (which argument
  dimensions are 1) with dynamic widths, prompt lengths and key counts, and then called directly. Prefills,
  decoding steps and wavefronts of any width share the same few graphs, so a benchmark slice never triggers a
  compilation after the first prompts (tested). Recurrences with no decision between them run ``CHUNK`` per call.
- CUDA, ``compile=True``: whole sampler steps are captured as CUDA graphs per shape and replayed
  (:meth:`Runner.step`, :mod:`recdiff.engine.graphs`); widths are padded to powers of two so that a run meets
  few shapes.
"""

from __future__ import annotations

import functools
import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from recdiff import fused
from recdiff.cache import SlotKV
from recdiff.engine import pieces
from recdiff.engine.graphs import Graphs
from recdiff.engine.pieces import own_calls
from recdiff.engine.program import SMALL, Programs, internals
from recdiff.engine.step import Step, make_step
from recdiff.model import RecurrentDepthModel


def set_compile(model: RecurrentDepthModel, compile: bool) -> None:
    """Switch how the engine runs ``model`` (what ``recdiff.load_model(..., compile=...)`` sets). On a CPU, a torch
    too old for the compile path fails here, in one line (:func:`recdiff.engine.program.internals`). On CUDA the
    steps replay from CUDA graphs, with each layer's elementwise work fused where Triton runs (:mod:`recdiff.fused`)."""
    if compile and model.device.type == "cpu":
        internals()
    model.set_fused(bool(compile) and fused.available(model.device.type))
    model.engine_options = {**model.engine_options, "compile": bool(compile)}
    if os.environ.get("RECDIFF_EMULATE_GRAPHS") == "1":  # the graph path on a CPU, for a whole sweep (tests)
        model.engine_options["emulate_graphs"] = True


CHUNK = 4  # recurrences per compiled call when nothing is decided between them (r' = 4, the paper's default, in one)


@dataclass(frozen=True)
class Prefill:
    """Prompts laid out for one prefill call into some cache rows (:meth:`Runner.prefill_start`): ``ids`` and ``pos``
    ``(B, T)``, padded at the end to the longest prompt; ``rows`` their cache rows (None: every slot, in order);
    ``dup``: one prompt, prefilled twice into its row; ``e`` P of the prompts, ``z0`` their initial states."""

    ids: Tensor
    pos: Tensor
    rows: Tensor | None
    lens: list[int]
    dup: bool
    e: Tensor
    z0: Tensor

    @property
    def T(self) -> int:
        return self.ids.shape[1]


class Runner:
    def __init__(self, model: RecurrentDepthModel, slots: int, length: int, policy: str = "shared",
                 max_steps: int = 1) -> None:
        p = next(model.parameters())
        self.model, self.slots, self.length, self.policy = model, slots, length, policy
        self.device, self.dtype = p.device, p.dtype
        self.cache = SlotKV(model.config, slots, length, policy, max_steps, device=p.device, dtype=p.dtype,
                            tokens=model.value_embeds is not None)
        cfg = model.config
        # positions past the block only ever hold padding rows (a wavefront padded to its width); give them angles
        self.freqs = model.freqs_cis if length <= cfg.block_size else model.rope_table(length, p.device)
        compile = bool(model.engine_options.get("compile"))
        self.compiled = compile and p.device.type == "cpu"  # pieces as Programs (recdiff/engine/program.py)
        if self.compiled:
            internals()  # a torch without the compile path's private API: one line, before any compute
        self.programs = Programs(model, self)
        # whole steps replayed from graphs: CUDA graphs when compiling on a GPU; "emulate_graphs" replays the same
        # static-buffer protocol without CUDA, so the graph path's bookkeeping is tested on a CPU
        emulate = bool(model.engine_options.get("emulate_graphs"))
        self.cuda_graphs = policy in ("shared", "lanes") and (emulate or (compile and p.device.type == "cuda"))
        self.per_step = policy in ("per_step", "lanes")  # core K/V in one plane per recurrence
        self.graphs = Graphs(emulate, functools.partial(own_calls, self), self.keeps)
        self._buffers: dict[tuple, Tensor] = {}
        self._views: dict[tuple, tuple[Tensor, ...]] = {}  # views of buffers (outputs(), leading()), made once
        self._ints: dict[str, tuple] = {}  # ints()'s host tensors, packers and device copies
        self._row_grids: dict[int, Tensor] = {}
        self.key_range = torch.arange(length, device=p.device)
        self.write_all = torch.ones(slots, dtype=torch.bool, device=p.device)
        # recurrences per compiled call where nothing is decided between them (and between adaptive-exit checks);
        # engine_options["chunk"] overrides CHUNK (the compile tests: a graph of two compiles in 60% of four's time)
        self.chunk = int(model.engine_options.get("chunk", CHUNK)) if self.compiled else 1
        self._call_memo: tuple | None = None  # the pieces' last freqs and mask (recdiff.engine.pieces._call)

    # ------------------------------------------------------------------------------------------ dispatch
    def run(self, st: Step, args: tuple[Tensor, ...], patches: dict[str, Any] | None = None,
            sig: tuple | None = None, static: tuple[tuple[int, ...], ...] | None = None) -> tuple[Tensor, ...]:
        """``st(self, *args)``: eagerly, or compiled (:meth:`recdiff.engine.program.Programs.run`, which explains
        ``patches``, ``sig`` and ``static``), keyed by the step (:mod:`recdiff.engine.step`)."""
        if not self.compiled:
            return st(self, *args)
        return self.programs.run(st, args, patches, sig, static)

    def step(self, st: Step, *inputs: Tensor, model: bool = True, fixed: int = 0, into: tuple[Tensor, ...] = (),
             sig: tuple | None = None, static: tuple[tuple[int, ...], ...] | None = None) -> Any:
        """``st(self, *inputs)``, replayed from a graph (:meth:`recdiff.engine.graphs.Graphs.run`, keyed by the step,
        the inputs' shapes and dtypes and where the first ``fixed`` are, which it reads and writes in place) when this
        runner uses CUDA graphs; a plain call otherwise. ``model``: the step composes the model's operations (P, R, C
        with the few operations around them), each run as :meth:`run` runs it; else it is a sampler's own tensor
        function (its bookkeeping), run as one program (:meth:`run` with :data:`~recdiff.engine.program.SMALL`'s
        settings, ``sig`` and ``static``). The step profile (:mod:`recdiff.tools.profile`) counts a replay of a model
        step as a model call, since a replay calls no Python. ``into`` (from :meth:`outputs`): under graphs the
        step's outputs are written there and ``into`` returned, so that a later graph reads them where they are."""
        if not model:
            st = make_step(_program, st, sig, static)
        if not self.cuda_graphs:
            return st(self, *inputs)
        if into:
            n = len(into)
            into_step = make_step(_into, st, n)
            self.graphs.run(into_step, functools.partial(_into, (st, n), self), (*into, *inputs), fixed + n)
            return into
        return self.graphs.run(st, functools.partial(st.fn, st.c, self), inputs, fixed)

    def outputs(self, name: str, shapes: tuple[tuple[tuple[int, ...], torch.dtype], ...], T: int
                ) -> tuple[Tensor, ...]:
        """Under CUDA graphs, where a step writes its outputs (:meth:`step`'s ``into``): the first ``T`` rows
        (dimension 1) of buffers of the given full shapes and dtypes, kept for this runner's life (one set for every
        step shape: as each graph's own outputs, a set of logits per wavefront width would take gigabytes at batch
        32); () without graphs."""
        if not self.cuda_graphs:
            return ()
        key = (name, shapes, T)
        views = self._views.get(key)
        if views is None:
            views = self._views[key] = tuple(self._kept(f"{name}-{i}", shape, dtype).narrow(1, 0, T)
                                             for i, (shape, dtype) in enumerate(shapes))
        return views

    # ------------------------------------------------------------------------------------------ buffers and shapes
    def buffer(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
        """A zeroed tensor that this runner keeps for its life, one per name, shape and dtype: state a sampler writes
        in place, which a graph (kept by the runner, so across batches) reads and writes where it is. One batch uses
        a runner at a time, as it does the KV cache."""
        return self._kept(name, shape, dtype).zero_()

    def _kept(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
        key = (name, tuple(shape), dtype)
        buf = self._buffers.get(key)
        if buf is None:
            buf = self._buffers[key] = torch.zeros(shape, dtype=dtype, device=self.device)
        return buf

    def leading(self, buffers: tuple[Tensor, ...], T: int) -> tuple[Tensor, ...]:
        """The first ``T`` rows (dimension 1) of each buffer, dense, as compiled programs take them: for one slot,
        views with row-major strides (the same tensors at every call with this ``T``); for several, copies made once
        here rather than by each compiled piece that takes them."""
        if self.slots > 1:
            return tuple(t.narrow(1, 0, T).contiguous() for t in buffers)
        key = (*(id(t) for t in buffers), T)
        views = self._views.get(key)
        if views is None:
            shapes = [(1, T, *t.shape[2:]) for t in buffers]
            views = self._views[key] = tuple(t.as_strided(shape, torch.empty(shape, device="meta").stride())
                                             for t, shape in zip(buffers, shapes))
        return views

    def ints(self, name: str, values: list[int], shape: tuple[int, ...]) -> Tensor:
        """``values`` as one int64 tensor of ``shape`` on this runner's device, the same tensor at every call of
        ``name`` (a graph copies it into its own buffer): packed into a host tensor's memory with ``struct`` (cheaper
        than a NumPy assignment from a list; building a tensor from a list would cost a compiled batch-1 step more
        than its kernels), then copied to the device where that is not the host."""
        packed = self._ints.get(name)
        if packed is None or tuple(packed[0].shape) != shape:
            memory = np.zeros(shape, dtype=np.int64)
            host = torch.from_numpy(memory)
            pack = functools.partial(struct.Struct(f"={memory.size}q").pack_into, memory.reshape(-1).data.cast("B"), 0)
            dev = host if self.device.type == "cpu" else torch.empty_like(host, device=self.device)
            packed = self._ints[name] = (host, pack, dev)
        host, pack, dev = packed
        pack(*values)
        return dev if dev is host else dev.copy_(host)

    def row_grid(self, T: int) -> Tensor:
        """``0 … T-1`` for every slot, ``(slots, T)``, kept for this runner's life: a captured graph that reads it
        (a diffusion step's window rows) outlives the batch that captured it, and would read freed memory were the
        grid the batch's own."""
        grid = self._row_grids.get(T)
        if grid is None:
            grid = self._row_grids[T] = self.key_range[:T].expand(self.slots, T).contiguous()
        return grid

    def keeps(self, t: Tensor) -> bool:
        """Whether ``t`` lives as long as this runner (what a captured graph may hold besides its inputs)."""
        kept = (self.key_range, self.write_all, *self._buffers.values(), *self._row_grids.values())
        return any(t is k for k in kept)

    def keys(self, needed: int) -> int:
        """Cache positions a call attends to: ``needed`` (its furthest query position + 1) rounded up, to a power
        of two under CUDA graphs (a few captured shapes), else to a multiple of 64; at most the cache. Keys past a
        query's position are masked exactly, so this only saves work: results are bit-identical."""
        n = max(64, 1 << (needed - 1).bit_length()) if self.cuda_graphs else -(-needed // 64) * 64
        return min(self.length, n)

    def width(self, needed: int, most: int) -> int:
        """Rows of a step that needs ``needed`` (≤ ``most``): the power of two above it under CUDA graphs; compiled on
        a CPU at least two (a width of 1 would be a specialisation of its own, compiled again for every piece of the
        step; the padding row costs a row of compute in the rare step of a one-state wavefront)."""
        if self.cuda_graphs:
            return min(most, 1 << (needed - 1).bit_length())
        return min(most, max(needed, 2)) if self.compiled else needed

    # ------------------------------------------------------------------------------------------ the pieces
    def _tail(self, pos: Tensor, keys: int, write: Tensor | None, rows: Tensor | None
              ) -> tuple[tuple[Tensor, Tensor, Tensor], tuple[Tensor, ...]]:
        """The call arguments every piece takes after its own: (positions, keys, write mask) and, for a prefill of
        some of the slots, (their rows,); a call over every slot in order has none."""
        if write is None:
            write = self.write_all if rows is None else self.write_all[: pos.shape[0]]
        return (pos, self.key_range[:keys], write), (() if rows is None else (rows,))

    def embed(self, ids: Tensor, pos: Tensor, keys: int, rows: Tensor | None = None,
              write: Tensor | None = None) -> Tensor:
        """P."""
        pkw, rows_arg = self._tail(pos, keys, write, rows)
        return self.run(make_step(pieces.embed), (ids, *pkw, *rows_arg))[0]

    def embed_window(self, rows: Tensor, seq: Tensor, ptr: Tensor, keys: int,
                     momentum: tuple[float, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        """P over a diffusion step's window rows ``rows`` (B, T) (0 … T-1 in each: the program's rows, as for every
        piece, are its first argument's) of every slot, from the token ids ``seq`` (B, S) and the pointers ``ptr``
        (its first row: each slot's start); with ``momentum`` (η, the step's rows of the window's η·e_prev) mixed
        with the previous embeddings (:func:`~recdiff.engine.pieces.window`). Returns e (B, T, E) and the
        positions (B, T)."""
        eta, eta_e_prev = momentum if momentum is not None else (0.0, None)
        args = (rows, seq, ptr, *(() if eta_e_prev is None else (eta_e_prev,)), self.key_range[:keys], self.write_all)
        return self.run(make_step(pieces.window, eta), args)  # type: ignore[return-value]

    def decode(self, z: Tensor, pos: Tensor, keys: int, rows: Tensor | None = None,
               write: Tensor | None = None, float32: bool = True, plane: int = 0) -> Tensor:
        """C; ``plane``: the coda's K/V plane of a lanes cache (its readout depth)."""
        pkw, rows_arg = self._tail(pos, keys, write, rows)
        if self.policy == "lanes":  # the plane a tensor: one program for every readout
            at = torch.tensor(plane, device=self.device)
            return self.run(make_step(pieces.plane_decode), (z, *pkw, at, *rows_arg))[0]
        return self.run(make_step(pieces.decode, float32), (z, *pkw, *rows_arg))[0]

    def _step_arg(self, step: int) -> tuple[Any, ...]:
        """The recurrence index a per_step core piece takes: an int eagerly (its plane is a view), a 0-d tensor
        compiled (one graph for every step)."""
        if not self.per_step:
            return ()
        return (torch.tensor(step, device=self.device),) if self.compiled else (step,)

    def cores(self, z: Tensor, e: Tensor, pos: Tensor, keys: int, n: int, rows: Tensor | None = None,
              write: Tensor | None = None, step0: int = 0) -> Tensor:
        """``n`` recurrences (the first is recurrence ``step0`` of these positions) with no decision between them:
        compiled, in calls of ``self.chunk`` (single ones for the rest). A prefill of some rows (``rows``) runs single
        recurrences: its graphs are compiled for admissions alone, and a chunk of four compiles four times longer."""
        pos_keys_write, rows_arg = self._tail(pos, keys, write, rows)
        per_step = self.per_step
        k = 0
        while k < n:
            m = self.chunk if n - k >= self.chunk and rows is None else 1
            args = (z, e, *pos_keys_write, *self._step_arg(step0 + k), *rows_arg)
            z = self.run(make_step(pieces.core, m, per_step), args)[0]
            k += m
        return z

    def cores_exit(self, z: Tensor, e: Tensor, carry: tuple[Tensor, ...], pos: Tensor, keys: int, n: int,
                   step0: int, epsilon: float | None = None, q: float | None = None) -> tuple[Tensor, ...]:
        """``n`` recurrences of a decoding step over every slot, each row exiting once its latent change falls below
        ``epsilon`` (``carry``: exited, recurrences taken; :func:`~recdiff.engine.pieces.exit`) or, with an exit
        gate's ``q``, once its cumulative exit probability reaches it (``carry``: also that probability and the
        probability of no exit so far; :func:`~recdiff.engine.pieces.gate`). Returns z and the carry."""
        piece, threshold = (pieces.exit, epsilon) if q is None else (pieces.gate, q)
        args = (z, e, *carry, pos, self.key_range[:keys], *self._step_arg(step0))
        return self.run(make_step(piece, n, self.per_step, threshold), args)

    def recur(self, ids: Tensor, pos: Tensor, r: int, z: Tensor | None = None, keys: int | None = None) -> Tensor:
        """P, r recurrences from ``z`` (zeros when None), C over every slot → logits ``(B, T, V)`` (static depth: no
        decisions)."""
        keys = keys or self.length
        e = self.embed(ids, pos, keys)
        if z is None:
            z = self.model.initial_state(e, 0.0)
        return self.decode(self.cores(z, e, pos, keys, r), pos, keys)

    # ------------------------------------------------------------------------------------------ lanes
    # One-position rows at their own positions, physical indices, depths and branches (a lanes cache): the pipelined
    # self-speculative sampler's calls (recdiff/samplers/loopspec.py). ``visible`` (B, keys) bool: the keys each row
    # sees; ``rows`` (B,) their cache rows; ``plane`` (B,) each row's recurrence (cores) or readout (decode).
    def lane_embed(self, ids: Tensor, pos: Tensor, slot: Tensor, visible: Tensor, rows: Tensor) -> Tensor:
        """P."""
        return self.run(make_step(pieces.lane_embed), (ids, pos, slot, visible, rows))[0]

    def lane_cores(self, z: Tensor, e: Tensor, pos: Tensor, slot: Tensor, visible: Tensor, rows: Tensor,
                   plane: Tensor, n: int) -> Tensor:
        """``n`` recurrences, each row from its own ``plane`` on; compiled in calls of ``self.chunk``."""
        k = 0
        while k < n:
            m = (self.chunk if n - k >= self.chunk else 1) if self.compiled else n - k
            z = self.run(make_step(pieces.lane_core, m), (z, e, pos, slot, visible, rows, plane + k))[0]
            k += m
        return z

    def lane_decode(self, z: Tensor, pos: Tensor, slot: Tensor, visible: Tensor, rows: Tensor,
                    plane: Tensor) -> Tensor:
        """C, each row's coda K/V in its readout's ``plane``: float32 logits ``(B, 1, V)``."""
        return self.run(make_step(pieces.lane_decode), (z, pos, slot, visible, rows, plane))[0]

    # ------------------------------------------------------------------------------------------ prefill
    def prefill_start(self, prompts: list[list[int]], slots: list[int], init_scale: float = 0.0,
                      generators: list[torch.Generator] | None = None) -> Prefill:
        """Prompts laid out for one call into their cache rows ``slots``, padded at the end to the longest (a padding
        position lies past its prompt: no prompt position sees it, and decoding writes it before any query reads it),
        with P of them (their K/V written) and each prompt's initial state, InitState(``init_scale``) drawn from its
        own generator (zeros at 0)."""
        dev, n, lens = self.device, len(prompts), [len(p) for p in prompts]
        # every slot in order: the decoding calls' own form (no rows). A prefill of some rows is at least two rows by
        # two positions wide (sizes of 1 are compiled graphs of their own): one prompt is prefilled twice into its
        # row (the copy writes the very same K/V), a one-token prompt gets a padding position
        rows = None if slots == list(range(self.slots)) else torch.tensor(slots, device=dev)
        dup = rows is not None and n == 1
        T = max(*lens, 1 if rows is None else 2)
        ids = torch.tensor([p + [0] * (T - len(p)) for p in prompts], device=dev)
        pos = torch.arange(T, device=dev)[None].expand(n + dup, T)
        if dup:
            ids, rows = ids.expand(2, T), rows.expand(2)
        e = self.embed(ids, pos, T, rows)
        z = self.model.initial_state(e, 0.0)
        if init_scale > 0:
            for i, g in enumerate(generators):
                z[i, : lens[i]] = self.model.initial_state(z[i : i + 1, : lens[i]], init_scale, g)[0]
            if dup:
                z[1] = z[0]
        return Prefill(ids, pos, rows, lens, dup, e, z)

    def prefill_end(self, p: Prefill, z: Tensor) -> tuple[Tensor, Tensor]:
        """C over the prompts' final states ``z``: the last prompt position's logits ``(n, V)`` and state
        ``(n, 1, E)``."""
        logits = self.decode(z, p.pos, p.T, p.rows)
        last = torch.tensor(p.lens, device=self.device) - 1
        at = torch.arange(len(p.lens), device=self.device)
        return logits[at, last], z[at, last][:, None]

    def prefill(self, prompts: list[list[int]], slots: list[int], r: int, init_scale: float = 0.0,
                generators: list[torch.Generator] | None = None) -> tuple[Tensor, Tensor]:
        """Prompts into their cache rows ``slots`` in one call (:meth:`prefill_start`), ``r`` recurrences each;
        returns the last prompt position's logits ``(n, V)`` and state ``(n, 1, E)``."""
        p = self.prefill_start(prompts, slots, init_scale, generators)
        return self.prefill_end(p, self.cores(p.z0, p.e, p.pos, p.T, r, p.rows))


def _into(c: tuple[Step, int], run: Runner, *args: Tensor) -> tuple[Tensor, ...]:
    """Step ``c[0]`` over ``args[n:]``, its outputs copied into ``args[:n]`` (:meth:`Runner.step`'s ``into``)."""
    st, n = c
    for out, t in zip(args[:n], st(run, *args[n:])):
        out.copy_(t)
    return ()


def _program(c: tuple[Step, tuple | None, tuple | None], run: Runner, *args: Tensor) -> tuple[Tensor, ...]:
    """A sampler's tensor step ``c[0]`` as one program (:meth:`Runner.run` with :data:`SMALL`, the caller's
    signature ``c[1]`` and static dimensions ``c[2]``)."""
    st, sig, static = c
    return run.run(st, args, SMALL, sig, static)
