"""The model's pieces as pure functions of tensors, what a :class:`~recdiff.engine.runner.Runner` runs.

A piece is a step function (:mod:`recdiff.engine.step`) ``fn(c, run, *args) -> tuple of tensors``, ``c`` its
constants: it reads the runner's model and fixed tensors (KV cache, RoPE table, the all-rows write mask) and writes
K/V into its cache, nothing else (the contract of :mod:`recdiff.engine.program`). ``args`` are the call's tensors,
in order: what the piece works on, then ``pos`` (B, T) absolute positions,
``keys`` (a slice of ``runner.key_range``: its length is the number of cache positions attended to), ``write`` (B,)
bool (rows that store their K/V), and where the call is a prefill of some slots, ``rows`` (B,) their cache rows.
Under ``per_step`` a core piece also takes ``step`` (0-d long): the recurrence index of its first recurrence.
The lane pieces (one-position rows of a lanes cache, each at its own depth and branch) take ``pos``, ``slot`` (each
row's physical index), ``visible`` (B, keys) bool and ``rows`` instead, and a core or decode one ``plane`` (B,).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import torch
from torch import Tensor

from recdiff.cache import Call, make_call
from recdiff.model import relative_change

# the runner (recdiff.engine.runner.Runner), which imports this module: named, not imported
Runner = Any


def _call(run: Runner, pos: Tensor, keys: Tensor, write: Tensor, rows: Tensor | None = None) -> Call:
    """The call's freqs and mask. Eagerly, the pieces of one step share them: they are built again only when the
    positions, write mask or rows are other tensors (callers never change these in place) or the key count differs."""
    if torch.compiler.is_compiling():
        return make_call(run.freqs, pos, keys.shape[0], rows, write)
    inputs = (pos, write, rows)
    memo = run._call_memo  # holds its tensors, so their ids cannot be reused while it stands
    if memo is None or memo[1] != keys.shape[0] or any(a is not b for a, b in zip(memo[0], inputs)):
        memo = run._call_memo = (inputs, keys.shape[0], make_call(run.freqs, pos, keys.shape[0], rows, write))
    return memo[2]


def own_calls(run: Runner, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` building its calls' freqs and masks itself (:func:`_call`'s memo emptied around it), for a step that
    is captured as a graph: its input buffers are the same tensors at every replay with other positions in them, so
    a memo made before the capture would be baked into the graph (and, emulated, served stale at every replay)."""

    def own(*args: Tensor) -> Any:
        run._call_memo = None
        try:
            return fn(*args)
        finally:
            run._call_memo = None

    return own


def embed(c: tuple, run: Runner, ids: Tensor, pos: Tensor, keys: Tensor, write: Tensor, *rows: Tensor
          ) -> tuple[Tensor, ...]:
    """P."""
    return (run.model.embed(ids, _call(run, pos, keys, write, *rows), run.cache),)


def window(c: tuple[float], run: Runner, rows: Tensor, seq: Tensor, ptr: Tensor, *rest: Tensor) -> tuple[Tensor, ...]:
    """P over a diffusion step's window, over every slot, taking its inputs from the batch state: the token ids and
    absolute positions of the window rows ``rows`` (B, T) from each slot's start (``ptr[0]``); with η = ``c[0]`` > 0
    the embedding momentum e = (1 − η)·P(y) + η·e_prev, the caller handing in the step's rows of the window's η·e_prev
    before ``keys`` and ``write``. Returns (e, the positions). Compiled, the gather and the mix are one program with P
    (as separate calls they would cost a compiled step more than the gather itself); the window's states stay out (a
    copy of them inside the program is slower than a view outside it)."""
    (eta,) = c
    *eta_e_prev, keys, write = rest
    pos = ptr[0] + rows
    e = embed((), run, seq.gather(1, pos), pos, keys, write)[0]
    if eta_e_prev:  # (B, T, E), as the rows (sliced here, a window's row count would be specialised on)
        e = e * (1 - eta) + eta_e_prev[0]
    return e, pos


def decode(c: tuple[bool], run: Runner, z: Tensor, pos: Tensor, keys: Tensor, write: Tensor, *rows: Tensor
           ) -> tuple[Tensor, ...]:
    """C; ``c``: (float32 logits,) (:meth:`~recdiff.model.RecurrentDepthModel.decode`)."""
    return (run.model.decode(z, _call(run, pos, keys, write, *rows), run.cache, c[0]),)


def core(c: tuple[int, bool], run: Runner, z: Tensor, e: Tensor, pos: Tensor, keys: Tensor, write: Tensor,
         *rest: Tensor) -> tuple[Tensor, ...]:
    """``n`` recurrences with no decision between them; ``c``: (n, per_step: a ``step`` argument leads ``rest``)."""
    n, per_step = c
    step, rows = (rest[0], rest[1:]) if per_step else (0, rest)
    call = _call(run, pos, keys, write, *rows)
    for j in range(n):
        z = run.model.core_step(z, e, call, run.cache, step + j)
    return (z,)


def exit(c: tuple[int, bool, float], run: Runner, z: Tensor, e: Tensor, exited: Tensor, taken: Tensor, pos: Tensor,
         keys: Tensor, *rest: Tensor) -> tuple[Tensor, ...]:
    """``n`` recurrences of one-position rows with adaptive exits tracked on the device (``c``: n, per_step, ε): a
    row whose state moved less than ε (δ, relative to its norm) stops — it keeps its state and the K/V of its last
    recurrence — while the others go on. The caller (the sampler) gives ε and decides when to stop calling;
    recurrences after every row stopped change nothing, so it may check "all stopped?" only every ``n`` recurrences
    and get exactly the result of checking after each."""
    n, per_step, epsilon = c
    step = rest[0] if per_step else 0
    call = _call(run, pos, keys, run.write_all)
    for j in range(n):
        call = replace(call, write=~exited)  # a row that exited keeps the K/V of its last recurrence
        z_new = run.model.core_step(z, e, call, run.cache, step + j)
        delta = relative_change(z_new, z).mean(-1)  # (B,): one position per row
        z = torch.where(exited[:, None, None], z, z_new)
        taken = taken + (~exited).long()
        exited = exited | (delta < epsilon)
    return z, exited, taken


def gate(c: tuple[int, bool, float], run: Runner, z: Tensor, e: Tensor, exited: Tensor, taken: Tensor, cum: Tensor,
         rem: Tensor, pos: Tensor, keys: Tensor, *rest: Tensor) -> tuple[Tensor, ...]:
    """:func:`exit` with an exit gate's rule (``c``: n, per_step, q): a row stops once its cumulative exit
    probability (float32, as the Ouro reference accumulates it: :class:`recdiff.samplers.ar.Gate`) reaches q; ``cum``
    and ``rem`` (the probability of no exit so far) carry over between calls."""
    n, per_step, q = c
    step = rest[0] if per_step else 0
    call = _call(run, pos, keys, run.write_all)
    for j in range(n):
        call = replace(call, write=~exited)  # a row that exited keeps the K/V of its last recurrence
        z_new = run.model.core_step(z, e, call, run.cache, step + j)
        lam = run.model.exit_probability(z_new)[:, 0]  # (B,): one position per row
        cum = torch.where(exited, cum, cum + lam * rem)
        rem = torch.where(exited, rem, rem * (1 - lam))
        z = torch.where(exited[:, None, None], z, z_new)
        taken = taken + (~exited).long()
        exited = exited | (cum >= q)
    return z, exited, taken, cum, rem


def plane_decode(c: tuple, run: Runner, z: Tensor, pos: Tensor, keys: Tensor, write: Tensor, plane: Tensor,
                 *rows: Tensor) -> tuple[Tensor, ...]:
    """C of a prefill into a lanes cache, its coda K/V in the readout plane ``plane`` (0-d; float32 logits)."""
    return (run.model.decode(z, _call(run, pos, keys, write, *rows), run.cache, True, plane),)


def lane_call(run: Runner, pos: Tensor, slot: Tensor, visible: Tensor, rows: Tensor) -> Call:
    return make_call(run.freqs, pos, visible.shape[1], rows, None, slot, visible)


def lane_embed(c: tuple, run: Runner, ids: Tensor, pos: Tensor, slot: Tensor, visible: Tensor, rows: Tensor
               ) -> tuple[Tensor, ...]:
    """P of lanes."""
    return (run.model.embed(ids, lane_call(run, pos, slot, visible, rows), run.cache),)


def lane_core(c: tuple[int], run: Runner, z: Tensor, e: Tensor, pos: Tensor, slot: Tensor, visible: Tensor,
              rows: Tensor, plane: Tensor) -> tuple[Tensor, ...]:
    """``n`` = ``c[0]`` recurrences of lanes, each from its own plane on."""
    call = lane_call(run, pos, slot, visible, rows)
    for j in range(c[0]):
        z = run.model.core_step(z, e, call, run.cache, plane + j)
    return (z,)


def lane_decode(c: tuple, run: Runner, z: Tensor, pos: Tensor, slot: Tensor, visible: Tensor, rows: Tensor,
                plane: Tensor) -> tuple[Tensor, ...]:
    """C of lanes, each row's coda K/V in its readout's ``plane``: float32 logits."""
    return (run.model.decode(z, lane_call(run, pos, slot, visible, rows), run.cache, True, plane),)
