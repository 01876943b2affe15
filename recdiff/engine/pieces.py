"""The model's pieces as pure functions of tensors, what a :class:`~recdiff.engine.runner.Runner` runs.

A piece is ``fn(model, runner, args) -> tuple of tensors`` (the contract of :mod:`recdiff.engine.program`): it reads
the runner's fixed tensors (KV cache, RoPE table, the all-rows write mask) and writes K/V into its cache, nothing
else. ``args`` are the call's tensors, in order: what the piece works on, then ``pos`` (B, T) absolute positions,
``keys`` (a slice of ``runner.key_range``: its length is the number of cache positions attended to), ``write`` (B,)
bool (rows that store their K/V), and where the call is a prefill of some slots, ``rows`` (B,) their cache rows.
Under ``per_step`` a core piece also takes ``step`` (0-d long): the recurrence index of its first recurrence.
The lane pieces (one-position rows of a lanes cache, each at its own depth and branch) take ``pos``, ``slot`` (each
row's physical index), ``visible`` (B, keys) bool and ``rows`` instead, and a core or decode one ``plane`` (B,).
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch import Tensor

from recdiff.cache import Call, make_call
from recdiff.model import RecurrentDepthModel, relative_change

if TYPE_CHECKING:
    from recdiff.engine.runner import Runner

Piece = Callable[[RecurrentDepthModel, "Runner", tuple[Tensor, ...]], tuple[Tensor, ...]]


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


def embed_piece(model: RecurrentDepthModel, run: Runner, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    ids, pos, keys, write, *rows = args
    return (model.embed(ids, _call(run, pos, keys, write, *rows), run.cache),)


@functools.cache
def window_piece(eta: float) -> Piece:
    """P over a diffusion step's window, over every slot, taking its inputs from the batch state: the token ids and
    absolute positions of the window rows ``rows`` (B, T) from each slot's start (``ptr[0]``); with η > 0 the
    embedding momentum e = (1 − η)·P(y) + η·e_prev, the caller handing in the step's rows of the window's η·e_prev.
    Returns (e, the positions). Compiled, the gather and the mix are one program with P (as separate calls they
    would cost a compiled step more than the gather itself); the window's states stay out (a copy of them inside
    the program is slower than a view outside it)."""

    def piece(model: RecurrentDepthModel, run: Runner, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        rows, seq, ptr, *eta_e_prev, keys, write = args
        pos = ptr[0] + rows
        e = embed_piece(model, run, (seq.gather(1, pos), pos, keys, write))[0]
        if eta_e_prev:  # (B, T, E), as the rows (sliced here, a window's row count would be specialised on)
            e = e * (1 - eta) + eta_e_prev[0]
        return e, pos

    return piece


def decode_piece(model: RecurrentDepthModel, run: Runner, args: tuple[Tensor, ...], float32: bool = True
                 ) -> tuple[Tensor, ...]:
    z, pos, keys, write, *rows = args
    return (model.decode(z, _call(run, pos, keys, write, *rows), run.cache, float32),)


# logits in the model's dtype (RecurrentDepthModel.decode's float32)
raw_decode_piece: Piece = functools.partial(decode_piece, float32=False)


def core_piece(n: int, per_step: bool) -> Piece:
    """``n`` recurrences with no decision between them."""

    def piece(model: RecurrentDepthModel, run: Runner, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        z, e, pos, keys, write, *rest = args
        step, rows = (rest[0], rest[1:]) if per_step else (0, rest)
        call = _call(run, pos, keys, write, *rows)
        for j in range(n):
            z = model.core_step(z, e, call, run.cache, step + j)
        return (z,)

    return piece


def exit_piece(n: int, per_step: bool, epsilon: float) -> Piece:
    """``n`` recurrences of one-position rows with adaptive exits tracked on the device: a row whose state moved
    less than ε (δ, relative to its norm) stops — it keeps its state and the K/V of its last recurrence — while the
    others go on. The caller (the sampler) gives ε and decides when to stop calling; recurrences after every row
    stopped change nothing, so it may check "all stopped?" only every ``n`` recurrences and get exactly the result
    of checking after each."""

    def piece(model: RecurrentDepthModel, run: Runner, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        z, e, exited, taken, pos, keys, *rest = args
        step = rest[0] if per_step else 0
        call = _call(run, pos, keys, run.write_all)
        for j in range(n):
            call = replace(call, write=~exited)  # a row that exited keeps the K/V of its last recurrence
            z_new = model.core_step(z, e, call, run.cache, step + j)
            delta = relative_change(z_new, z).mean(-1)  # (B,): one position per row
            z = torch.where(exited[:, None, None], z, z_new)
            taken = taken + (~exited).long()
            exited = exited | (delta < epsilon)
        return z, exited, taken

    return piece


def plane_decode_piece(model: RecurrentDepthModel, run: Runner, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """C of a prefill into a lanes cache, its coda K/V in the readout plane ``plane`` (0-d; float32 logits)."""
    z, pos, keys, write, plane, *rows = args
    return (model.decode(z, _call(run, pos, keys, write, *rows), run.cache, True, plane),)


def lane_call(run: Runner, pos: Tensor, slot: Tensor, visible: Tensor, rows: Tensor) -> Call:
    return make_call(run.freqs, pos, visible.shape[1], rows, None, slot, visible)


def lane_embed_piece(model: RecurrentDepthModel, run: Runner, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    ids, pos, slot, visible, rows = args
    return (model.embed(ids, lane_call(run, pos, slot, visible, rows), run.cache),)


@functools.cache
def lane_core_piece(n: int) -> Piece:
    """``n`` recurrences of lanes, each from its own plane on."""

    def piece(model: RecurrentDepthModel, run: Runner, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        z, e, pos, slot, visible, rows, plane = args
        call = lane_call(run, pos, slot, visible, rows)
        for j in range(n):
            z = model.core_step(z, e, call, run.cache, plane + j)
        return (z,)

    return piece


def lane_decode_piece(model: RecurrentDepthModel, run: Runner, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    z, pos, slot, visible, rows, plane = args
    return (model.decode(z, lane_call(run, pos, slot, visible, rows), run.cache, True, plane),)


@functools.cache
def gate_exit_piece(n: int, per_step: bool, q: float) -> Piece:
    """:func:`exit_piece` with an exit gate's rule: a row stops once its cumulative exit probability (float32, as
    the Ouro reference accumulates it: :class:`recdiff.samplers.ar.Gate`) reaches ``q``; ``cum`` and ``rem`` (the
    probability of no exit so far) carry over between calls."""

    def piece(model: RecurrentDepthModel, run: Runner, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        z, e, exited, taken, cum, rem, pos, keys, *rest = args
        step = rest[0] if per_step else 0
        call = _call(run, pos, keys, run.write_all)
        for j in range(n):
            call = replace(call, write=~exited)  # a row that exited keeps the K/V of its last recurrence
            z_new = model.core_step(z, e, call, run.cache, step + j)
            lam = model.exit_probability(z_new)[:, 0]  # (B,): one position per row
            cum = torch.where(exited, cum, cum + lam * rem)
            rem = torch.where(exited, rem, rem * (1 - lam))
            z = torch.where(exited[:, None, None], z, z_new)
            taken = taken + (~exited).long()
            exited = exited | (cum >= q)
        return z, exited, taken, cum, rem

    return piece
