"""The model runner: batched model calls over fixed buffers; the only part that is compiled or captured.

A :class:`Runner` owns a :class:`~recdiff.cache.SlotKV` of ``slots`` rows × ``length`` positions and runs the
model's three pieces (P, recurrences of R, C) for a batch of rows at given absolute positions. It holds no
policy: samplers (``recdiff/samplers``) decide what to run; the scheduler (:mod:`recdiff.engine.scheduler`) decides
which sequence sits in which row.

Every piece is a pure function of tensors (:data:`PIECES`, ``fn(model, runner, args)``), run in one of three ways
(``model.engine_options``, set by ``recdiff.load_model(..., compile=...)``):

- eager (default): plain PyTorch.
- CPU, ``compile=True``: each piece is a :class:`~recdiff.engine.program.Program`, compiled by inductor once per
  specialisation (which argument dimensions are 1) with dynamic widths, prompt lengths and key counts, and then
  called directly. Prefills, decoding steps and wavefronts of any width share the same few graphs, so a benchmark
  slice never triggers a compilation after the first prompts (tested). Recurrences with no decision between them
  run ``CHUNK`` per call.
- CUDA, ``compile=True``: whole sampler steps are captured as CUDA graphs per shape and replayed
  (:meth:`Runner.graphed`), which removes the per-kernel launch cost that dominates batch-1 decoding; widths are
  padded to powers of two so that a run meets few shapes.

Runners are cached per model and shape, so warm-up is paid once per process, not per prompt.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any, Callable

import torch
from torch import Tensor

from recdiff import fused
from recdiff.cache import Call, SlotKV, make_call
from recdiff.engine.program import Program, internals, prepare
from recdiff.model import RecurrentDepthModel, relative_change


def set_compile(model: RecurrentDepthModel, compile: bool) -> None:
    """Switch how the engine runs ``model`` (what ``recdiff.load_model(..., compile=...)`` sets). On a CPU, a torch
    too old for the compile path fails here, in one line (:func:`recdiff.engine.program.internals`). On CUDA the
    steps replay from CUDA graphs, with each layer's elementwise work fused where Triton runs (:mod:`recdiff.fused`)."""
    if compile and model.device.type == "cpu":
        internals()
    model.set_fused(bool(compile) and fused.available(model.device.type))
    model.engine_options = {**model.engine_options, "compile": bool(compile)}


PAD = 256  # positions past the block every runner has (the default wavefront, 128, plus its growth fits)
CHUNK = 4  # recurrences per compiled call when nothing is decided between them (r' = 4, the paper's default, in one)
# inductor settings of a program of few kernels and many small inputs (a sampler's step function): the C++ wrapper
# turns every dynamic size into a tensor on each call (about 4 µs apiece) and saves little on few kernels; measured on
# the diffusion step's advance, embedded model, batch 1: 98 → 60 µs a call. The wrapper's checks of each input's
# size, strides and alignment are off: prepare() gives every argument row-major strides, the sizes are the arguments'
# own, and CPU kernels load unaligned (advance, 11 arguments: 40.0 → 28.4 µs a call, median of 7 side-by-side rounds)
# a call whose caller hands in its arguments' specialisation (Runner.run's sig) is checked against prepare() on its
# key's first call and every CHECK_EVERY-th after (the test suite sets 1: every call)
CHECK_EVERY = 64
SMALL = {"cpp_wrapper": False, "size_asserts": False, "alignment_asserts": False, "scalar_asserts": False}


def cache_length(model: RecurrentDepthModel, pad: int = 0) -> int:
    """Positions per slot: the whole block, plus ``pad`` positions past it (rounded up to a power of two, at least
    ``PAD``) that only padding rows reach (a wavefront padded to its width, a draft past the last kept token).
    Every sampler of a model thus gets runners of the same length, which share their compiled graphs and buffers.
    Attention reads only the prefix of a slot that a call can see, so a long cache costs memory, not time; keys past
    a query's position are masked exactly (a longer cache gives bit-identical results)."""
    return model.config.block_size + max(PAD, 1 << max(pad - 1, 0).bit_length())


# ---------------------------------------------------------------------------------------------- the pieces
# args: the call's tensors, in order: what the piece works on, then ``pos`` (B, T) absolute positions, ``keys``
# (a slice of runner.key_range: its length is the number of cache positions attended to), ``write`` (B,) bool
# (rows that store their K/V), and where the call is a prefill of some slots, ``rows`` (B,) their cache rows.
# Under per_step a core piece also takes ``step`` (0-d long): the recurrence index of its first recurrence.

def _call(run: "Runner", pos: Tensor, keys: Tensor, write: Tensor, rows: Tensor | None = None) -> Call:
    """The call's freqs and mask. Eagerly, the pieces of one step share them: they are built again only when the
    positions, write mask or rows are other tensors (callers never change these in place) or the key count differs."""
    if torch.compiler.is_compiling():
        return make_call(run.freqs, pos, keys.shape[0], rows, write)
    inputs = (pos, write, rows)
    memo = run._call_memo  # holds its tensors, so their ids cannot be reused while it stands
    if memo is None or memo[1] != keys.shape[0] or any(a is not b for a, b in zip(memo[0], inputs)):
        memo = run._call_memo = (inputs, keys.shape[0], make_call(run.freqs, pos, keys.shape[0], rows, write))
    return memo[2]


def embed_piece(model: RecurrentDepthModel, run: "Runner", args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    ids, pos, keys, write, *rows = args
    return (model.embed(ids, _call(run, pos, keys, write, *rows), run.cache),)


@functools.cache
def window_piece(eta: float) -> Callable[..., tuple[Tensor, ...]]:
    """P over a diffusion step's window, over every slot, taking its inputs from the batch state: the token ids and
    absolute positions of the window rows ``rows`` (B, T) from each slot's start (``ptr[0]``); with η > 0 the
    embedding momentum e = (1 − η)·P(y) + η·e_prev, the caller handing in the step's rows of the window's η·e_prev.
    Returns (e, the positions). Compiled, the gather and the mix are one program with P, where as
    eager views and operations of their own they cost a compiled batch-1 diffusion step more than the gather itself
    (the window's states stay out: a copy of them inside the program measured slower than a view outside it);
    eagerly they are those few operations."""

    def piece(model: RecurrentDepthModel, run: "Runner", args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        rows, seq, ptr, *eta_e_prev, keys, write = args
        pos = ptr[0] + rows
        e = embed_piece(model, run, (seq.gather(1, pos), pos, keys, write))[0]
        if eta_e_prev:  # (B, T, E), as the rows (sliced here, a window's row count would be specialised on)
            e = e * (1 - eta) + eta_e_prev[0]
        return e, pos

    return piece


def decode_piece(model: RecurrentDepthModel, run: "Runner", args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    z, pos, keys, write, *rows = args
    return (model.decode(z, _call(run, pos, keys, write, *rows), run.cache),)


def core_piece(n: int, per_step: bool) -> Callable[..., tuple[Tensor, ...]]:
    """``n`` recurrences with no decision between them."""

    def piece(model: RecurrentDepthModel, run: "Runner", args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        z, e, pos, keys, write, *rest = args
        step, rows = (rest[0], rest[1:]) if per_step else (0, rest)
        call = _call(run, pos, keys, write, *rows)
        for j in range(n):
            z = model.core_step(z, e, call, run.cache, step + j)
        return (z,)

    return piece


def exit_piece(n: int, per_step: bool, eps: float) -> Callable[..., tuple[Tensor, ...]]:
    """``n`` recurrences of one-position rows with adaptive exits tracked on the device: a row whose state moved
    less than ε (δ, relative to its norm) stops — it keeps its state and the K/V of its last recurrence — while the
    others go on. Recurrences after every row stopped change nothing, so a caller may check "all stopped?" only
    every ``n`` recurrences and get exactly the result of checking after each."""

    def piece(model: RecurrentDepthModel, run: "Runner", args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        z, e, exited, taken, pos, keys, *rest = args
        step = rest[0] if per_step else 0
        call = _call(run, pos, keys, run.write_all)
        for j in range(n):
            call = replace(call, write=~exited)  # a row that exited keeps the K/V of its last recurrence
            z_new = model.core_step(z, e, call, run.cache, step + j)
            delta = relative_change(z_new, z).mean(-1)  # (B,): one position per row
            z = torch.where(exited[:, None, None], z, z_new)
            taken = taken + (~exited).long()
            exited = exited | (delta < eps)
        return z, exited, taken

    return piece


class Runner:
    def __init__(self, model: RecurrentDepthModel, slots: int, length: int, policy: str = "shared",
                 max_steps: int = 1) -> None:
        p = next(model.parameters())
        self.model, self.slots, self.length, self.policy = model, slots, length, policy
        self.device, self.dtype = p.device, p.dtype
        self.cache = SlotKV(model.config, slots, length, policy, max_steps, device=p.device, dtype=p.dtype)
        cfg = model.config
        # positions past the block only ever hold padding rows (a wavefront padded to its width); give them angles
        self.freqs = model.freqs_cis if length <= cfg.block_size else model.rope_table(length, p.device)
        compile = bool(model.engine_options.get("compile"))
        self.compiled = compile and p.device.type == "cpu"  # pieces as Programs (recdiff/engine/program.py)
        if self.compiled:
            internals()  # a torch without the compile path's private API: one line, before any compute
        self._programs: dict[tuple, Program] = {}
        # (name, a caller's sig) → [program, prepare's sig, calls, the static dimensions' sizes]
        self._vouched_programs: dict[tuple, list] = {}
        # whole steps replayed from graphs: CUDA graphs when compiling on a GPU; "emulate_graphs" replays the same
        # static-buffer protocol without CUDA, so the graph path's bookkeeping is tested on a CPU
        emulate = bool(model.engine_options.get("emulate_graphs"))
        self.cuda_graphs = policy == "shared" and (emulate or (compile and p.device.type == "cuda"))
        self._graph_cls = _EmulatedGraph if emulate else _Graphed
        self._graphs: dict[Any, _Graphed] = {}
        self._buffers: dict[tuple, Tensor] = {}
        self.rows_all = torch.arange(slots, device=p.device)
        self.key_range = torch.arange(length, device=p.device)
        self.write_all = torch.ones(slots, dtype=torch.bool, device=p.device)
        self.chunk = CHUNK if self.compiled else 1  # recurrences per call between adaptive-exit checks
        self._call_memo: tuple | None = None

    @classmethod
    def get(cls, model: RecurrentDepthModel, slots: int, length: int, policy: str = "shared", max_steps: int = 1) -> "Runner":
        """The cached runner of this shape (one per process: compiled graphs and buffers are reused)."""
        steps = max_steps if policy == "per_step" else 1
        compile = bool(model.engine_options.get("compile"))
        runners = model.__dict__.setdefault("_runners", {})
        if compile:  # compiled pieces hold copies of the weights: weights changed in place or moved → compile anew
            stamp = tuple((p.data_ptr(), p._version) for p in model.parameters())
            if model.__dict__.get("_weights_stamp") != stamp:
                runners.clear()
                model.__dict__["_weights_stamp"] = stamp
        # any runner of this kind with room enough serves (its graphs are compiled already)
        fits = [k for k in runners if k[0] == slots and k[2] == policy and k[3] >= steps and k[4:] == (compile,)
                and k[1] >= length]
        if fits:
            return runners[min(fits, key=lambda k: (k[1], k[3]))]
        key = (slots, length, policy, steps, compile)
        if len(runners) >= 4:  # keep memory bounded when many shapes pass through one process
            runners.pop(next(iter(runners)))
        runners[key] = cls(model, *key[:4])
        return runners[key]

    # ------------------------------------------------------------------------------------------ running a piece
    def run(self, name: str, fn: Callable[..., tuple[Tensor, ...]], args: tuple[Tensor, ...],
            patches: dict[str, Any] | None = None, sig: tuple | None = None,
            static: tuple[tuple[int, ...], ...] | None = None) -> tuple[Tensor, ...]:
        """``fn(model, self, args)``: eagerly, or as the compiled program of ``name`` (which must name every
        constant ``fn`` depends on) for this specialisation of ``args``, compiled with inductor's ``patches`` over
        :data:`~recdiff.engine.program.PATCHES` (e.g. :data:`SMALL`). A caller that knows its arguments'
        specialisation hands it in as ``sig`` (:meth:`_vouched`) and skips :func:`prepare`'s pass over them; with
        it, ``static`` may name per argument the dimensions that are this runner's constants (slots, cache length,
        model widths), compiled as fixed sizes (fewer sizes to pass, loops of known length)."""
        if not self.compiled:
            return fn(self.model, self, args)
        if sig is not None:
            entry = self._vouched_programs.get((name, sig))
            if entry is None or entry[2] % CHECK_EVERY == 0:
                entry = self._vouched(name, sig, fn, args, patches, static)
            entry[2] += 1
            return entry[0](args)
        args, psig = prepare(args)
        key = (name, psig)
        prog = self._programs.get(key)
        if prog is None:
            prog = self._programs[key] = Program(fn, self.model, self, patches)
        return prog(args)

    def _vouched(self, name: str, sig: tuple, fn: Callable[..., tuple[Tensor, ...]], args: tuple[Tensor, ...],
                 patches: dict[str, Any] | None, static: tuple[tuple[int, ...], ...] | None = None) -> list:
        """The ``[program, prepare's signature, calls]`` entry of a caller's own ``sig``, checked against
        :func:`prepare` (on its first call and every :data:`CHECK_EVERY`-th after): the caller vouches that its
        arguments are contiguous as they are (a batch-1 view's odd stride in a size-1 dimension is never read) and
        that ``sig`` differs wherever prepare's signature would. A caller that breaks this fails here, in one line."""
        _, psig = prepare(args)
        key = (name, sig)
        entry = self._vouched_programs.get(key)
        if not all(a.is_contiguous() for a in args) or (entry is not None and entry[1] != psig) or (
                entry is not None and static and entry[3] != _sizes(args, static)):
            raise RuntimeError(f"{name[:60]}: arguments other than their caller's signature {sig} says "
                               f"(shapes {[tuple(a.shape) for a in args]})")
        if entry is None:
            # a program with static dimensions is its own: an unvouched call of the same name must not get it
            pkey = (name, psig) if static is None else (name, psig, static)
            prog = self._programs.get(pkey)
            if prog is None:
                prog = self._programs[pkey] = Program(fn, self.model, self, patches, static)
            entry = self._vouched_programs[key] = [prog, psig, 0, _sizes(args, static) if static else None]
        return entry

    def buffer(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
        """A zeroed tensor that this runner keeps for its life, one per name, shape and dtype: state a sampler writes
        in place, which a graph (kept by the runner, so across batches) reads and writes where it is. One batch uses
        a runner at a time, as it does the KV cache."""
        key = (name, tuple(shape), dtype)
        buf = self._buffers.get(key)
        if buf is None:
            buf = self._buffers[key] = torch.zeros(shape, dtype=dtype, device=self.device)
        return buf.zero_()

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
        return self.run(f"embed{len(rows_arg)}", embed_piece, (ids, *pkw, *rows_arg))[0]

    def embed_window(self, rows: Tensor, seq: Tensor, ptr: Tensor, keys: int,
                     momentum: tuple[float, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        """P over a diffusion step's window rows ``rows`` (B, T) (0 … T-1 in each: the program's rows, as for every
        piece, are its first argument's) of every slot, from the token ids ``seq`` (B, S) and
        the pointers ``ptr`` (its first row: each slot's start); with ``momentum`` (η, the step's rows of the window's
        η·e_prev) mixed with the previous embeddings (:func:`window_piece`). Returns e (B, T, E) and the positions
        (B, T)."""
        eta, eta_e_prev = momentum if momentum is not None else (0.0, None)
        args = (rows, seq, ptr, *(() if eta_e_prev is None else (eta_e_prev,)), self.key_range[:keys], self.write_all)
        return self.run(f"window-eta{eta!r}", window_piece(eta), args)  # type: ignore[return-value]

    def decode(self, z: Tensor, pos: Tensor, keys: int, rows: Tensor | None = None,
               write: Tensor | None = None) -> Tensor:
        pkw, rows_arg = self._tail(pos, keys, write, rows)
        return self.run(f"decode{len(rows_arg)}", decode_piece, (z, *pkw, *rows_arg))[0]

    def _step_arg(self, step: int) -> tuple[Any, ...]:
        """The recurrence index a per_step core piece takes: an int eagerly (its plane is a view), a 0-d tensor
        compiled (one graph for every step)."""
        if self.policy != "per_step":
            return ()
        return (torch.tensor(step, device=self.device),) if self.compiled else (step,)

    def cores(self, z: Tensor, e: Tensor, pos: Tensor, keys: int, n: int, rows: Tensor | None = None,
              write: Tensor | None = None, step0: int = 0) -> Tensor:
        """``n`` recurrences (the first is recurrence ``step0`` of these positions) with no decision between them:
        compiled, in calls of ``CHUNK`` (and single ones for the rest). A prefill of some rows (``rows``) runs single
        recurrences: its graphs are compiled for admissions alone, and a chunk of four compiles four times longer."""
        pos_keys_write, rows_arg = self._tail(pos, keys, write, rows)
        per_step = self.policy == "per_step"
        k = 0
        while k < n:
            m = CHUNK if self.compiled and n - k >= CHUNK and rows is None else 1
            args = (z, e, *pos_keys_write, *self._step_arg(step0 + k), *rows_arg)
            z = self.run(f"core{m}-{per_step}-{len(rows_arg)}", core_piece(m, per_step), args)[0]
            k += m
        return z

    def cores_exit(self, z: Tensor, e: Tensor, exited: Tensor, taken: Tensor, pos: Tensor, keys: int, n: int,
                   eps: float, step0: int) -> tuple[Tensor, Tensor, Tensor]:
        """``n`` recurrences of a decoding step over every slot with adaptive exits (:func:`exit_piece`)."""
        per_step = self.policy == "per_step"
        args = (z, e, exited, taken, pos, self.key_range[:keys], *self._step_arg(step0))
        return self.run(f"exit{n}-{per_step}-{eps!r}", exit_piece(n, per_step, eps), args)  # type: ignore[return-value]

    def recur(self, ids: Tensor, pos: Tensor, r: int, z: Tensor | None = None, keys: int | None = None) -> Tensor:
        """P, r recurrences from ``z`` (zeros when None), C over every slot → logits ``(B, T, V)`` (static depth: no
        decisions)."""
        keys = keys or self.length
        e = self.embed(ids, pos, keys)
        if z is None:
            z = torch.zeros_like(e)
        return self.decode(self.cores(z, e, pos, keys, r), pos, keys)

    def prefill(self, prompts: list[list[int]], slots: list[int], r: int, alpha: float = 0.0,
                generators: list[torch.Generator] | None = None, eps: float | None = None
                ) -> tuple[Tensor, Tensor, list[int]]:
        """Prompts into their cache rows ``slots`` in one call, padded at the end to the longest (a padding position
        lies past its prompt: no prompt position sees it, and decoding writes it before any query reads it). Each
        row starts from InitState(α) drawn from its own generator and runs ``r`` recurrences, or, with ``eps``,
        until the mean δ over its own prompt falls below ε (it then keeps its state and K/V while the others go on;
        the mean is taken over the prompt alone, exactly as for the prompt decoded by itself). Returns the last
        prompt position's logits ``(n, V)`` and state ``(n, 1, E)``, and each prompt's recurrences."""
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
        z = torch.zeros_like(e)
        if alpha > 0:
            for i, g in enumerate(generators):
                z[i, : lens[i]] = self.model.initial_state(z[i : i + 1, : lens[i]], alpha, g)[0]
            if dup:
                z[1] = z[0]
        steps = [r] * n
        if eps is None:
            z = self.cores(z, e, pos, T, r, rows)
        else:
            exited = [False] * n
            for k in range(r):
                write = torch.tensor([not x for x in exited + exited[:dup]], device=dev)  # an exited row keeps its K/V
                z_new = self.cores(z, e, pos, T, 1, rows, write, step0=k)
                delta = relative_change(z_new, z)
                # each prompt's mean over its own positions, read back and compared in Python as a prompt alone is
                means = torch.stack([delta[i, : lens[i]].mean() for i in range(n)]).tolist()
                z = torch.where(~write[:, None, None], z, z_new)
                for i in range(n):
                    if not exited[i] and means[i] < eps:
                        exited[i], steps[i] = True, k + 1
                if all(exited):
                    break
        logits = self.decode(z, pos, T, rows)
        last = torch.tensor(lens, device=dev) - 1
        at = torch.arange(n, device=dev)
        return logits[at, last], z[at, last][:, None], steps

    # ------------------------------------------------------------------------------------------ CUDA graphs
    def graphed(self, name: str, fn: Callable[..., Any], *inputs: Tensor, model: bool = True, fixed: int = 0) -> Any:
        """``fn(*inputs)``, replayed from a CUDA graph captured for these input shapes (and ``name``, which must
        name everything else ``fn`` depends on) when this runner uses CUDA graphs; a plain call otherwise.
        ``model``: ``fn`` is a model call (P, R, C with the few operations around them), not the sampler's own work;
        the step profile (:mod:`recdiff.engine.profile`) counts a replay by it, as a replay calls no Python.
        ``fixed``: the first inputs are the caller's own buffers, the same tensors at every call: the graph reads
        (and ``fn`` may write) them where they are, with no copy."""
        if not self.cuda_graphs:
            return fn(*inputs)
        key = (name, *(tuple(t.shape) for t in inputs))
        g = self._graphs.get(key)
        if g is None:
            g = self._graphs[key] = self._graph_cls(self._own_calls(fn), inputs, fixed)
        return g(*inputs)

    def _own_calls(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` building its calls' freqs and masks itself (:func:`_call`'s memo emptied around it): a graph's
        input buffers are the same tensors at every replay with other positions in them, so a memo made before the
        capture would be baked into the graph (and, emulated, served stale at every replay)."""

        def own(*args: Tensor) -> Any:
            self._call_memo = None
            try:
                return fn(*args)
            finally:
                self._call_memo = None

        return own


def _sizes(args: tuple[Tensor, ...], static: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """The sizes of ``args``' static dimensions (what a program compiled with them as constants assumes)."""
    return tuple(a.shape[d] for a, dims in zip(args, static, strict=True) for d in dims)


class _Graphed:
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
        _check_fixed(self.inputs, inputs, self.fixed)
        for buf, t in zip(self.inputs[self.fixed :], inputs[self.fixed :]):
            buf.copy_(t)
        self.graph.replay()
        return self.outputs


def _check_fixed(captured: list[Tensor], inputs: tuple[Tensor, ...], fixed: int) -> None:
    """A graph's fixed inputs must be the very buffers it was captured with (it reads and writes their memory)."""
    if any(a is not b for a, b in zip(captured[:fixed], inputs)):
        raise RuntimeError("a graph's fixed inputs must be the buffers it was captured with")


class _EmulatedGraph:
    """The CUDA-graph protocol without CUDA: static input buffers, and outputs that live in fixed tensors which
    the next replay overwrites (so code that keeps an output past the next step is caught on a CPU too)."""

    def __init__(self, fn: Callable[..., Any], inputs: tuple[Tensor, ...], fixed: int = 0) -> None:
        self.fn, self.fixed = fn, fixed
        self.inputs = [*inputs[:fixed], *(t.clone() for t in inputs[fixed:])]
        self.outputs: Any = None

    def __call__(self, *inputs: Tensor) -> Any:
        _check_fixed(self.inputs, inputs, self.fixed)
        for buf, t in zip(self.inputs[self.fixed :], inputs[self.fixed :]):
            buf.copy_(t)
        out = self.fn(*self.inputs)
        if self.outputs is None:
            self.outputs = _tree_map(lambda t: t.clone(), out)
        else:
            _tree_map(lambda o, t: o.copy_(t), self.outputs, out)
        return self.outputs


def _tree_map(fn: Callable[..., Tensor], tree: Any, *others: Any) -> Any:
    """``fn`` over the tensors of a nest of tuples, lists and dicts (and of ``others``, nested alike)."""
    if isinstance(tree, Tensor):
        return fn(tree, *others)
    if isinstance(tree, dict):
        return {k: _tree_map(fn, v, *(o[k] for o in others)) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(_tree_map(fn, v, *(o[i] for o in others)) for i, v in enumerate(tree))
    return tree
