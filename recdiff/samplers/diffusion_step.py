"""One diffusion sampler step as tensor operations over every slot and wavefront row (the device half of
:mod:`recdiff.samplers.diffusion`).

A slot's wavefront lives in *window rows*: row ``t`` is the state at absolute position ``start + t`` (it predicts
the token at ``start + t + 1``); rows ``0 … W-1`` are valid, the rest padding. The window buffers hold, per row,
the state ``z``, with momentum η times the previous step's embedding ``e`` (zero where the row was not embedded),
and with a recurrence budget or noise the state's sampler recurrences ``age``. Freezing ``shift`` leading states
moves the window: row ``t`` of the next step comes from row ``t + shift`` of this one, one gather per buffer.
Tokens and unchanged proposals are kept per absolute position.

A step is tensor functions around the model call (P, r' recurrences, C; P reads its token ids and positions from
``seq`` and the window's start: :meth:`recdiff.engine.runner.Runner.embed_window`): :func:`noised` (β > 0) on the
window's states before the recurrences and :func:`advance` after the call, which writes the batch state into its
buffers in place (they keep their shapes for the batch's life). Each runs eagerly, as a compiled program
(recdiff/engine/program.py) or inside a CUDA graph; everything it depends on besides its tensors is in
:class:`Rule` (part of a compiled program's key), and no Python branch depends on a tensor's size or value. The
host hands in each slot's pointers (``ptr``: start, W, the states it grows by this step, the previous shift), which
it keeps from the step's one read-back (:data:`READ`), and the step's random draws (α = ``init_scale`` > 0, random
headway ids, sampled proposals), made from each sequence's own stream. A slot without a live sequence has ``W = 0``
and ``growth = 0``: every row is padding and nothing it writes is ever read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from recdiff.params import AdaptiveRule, DiffusionParams, Freeze, FreezeRule


@dataclass(frozen=True)
class Rule:
    """A step's constants: the sampler's typed parameters (every field of them keys the step's programs and graphs,
    :mod:`recdiff.engine.step`) and what the call adds: greedy proposals, stops to check. The rest derives."""

    p: DiffusionParams
    greedy: bool
    tokens: bool  # stop ids or strings given: the read-back carries the proposals, which the host checks

    @property
    def noise(self) -> bool:
        """α > 0: new and noised states are InitState(α) draws (made on the host); else zeros."""
        return self.p.init_scale > 0

    @property
    def adaptive(self) -> bool:
        return self.p.freeze == Freeze.adaptive

    @property
    def reference(self) -> bool:
        return self.p.adaptive_rule == AdaptiveRule.reference

    @property
    def prefix(self) -> bool:
        return self.p.freeze_rule == FreezeRule.prefix

    @property
    def r_freeze(self) -> int | None:
        """The recurrence budget: r_freeze, else r under fixed freezing (final after r recurrences); none under
        adaptive freezing unless one is given."""
        return self.p.r_freeze or (None if self.adaptive else self.p.r)

    @property
    def ages(self) -> bool:
        """Whether the window keeps each state's sampler recurrences: for the budget and for β_t."""
        return self.r_freeze is not None or self.p.beta > 0


# What the host reads back after a step, per slot: the shift (states that left the wavefront, each freezing the token
# it predicts), then (rule.tokens) the tokens at start+1 … start+T, of which the first `shift` are now frozen.
READ = ("shift", "tokens")
PTR = ("start", "W", "growth", "lag")  # the pointers the host hands in, one (4, B, 1) tensor


def state_names(rule: Rule) -> tuple[str, ...]:
    """The batch state :func:`advance` reads and writes, in order: per absolute position ``seq`` (tokens) and
    ``unchanged`` (steps at which the token's new proposal equalled the one it replaced); the window ``z``, ``e``
    (momentum), ``age`` (:attr:`Rule.ages`)."""
    return ("seq", "unchanged", "z") + (("e",) if rule.p.eta > 0 else ()) + (("age",) if rule.ages else ())


def beta_per_position(beta: float, schedule: str, n: Tensor, r: int) -> Tensor:
    """β_t for each wavefront position given its recurrence count n (float tensor)."""
    if schedule == "constant":
        return torch.full_like(n, beta)
    if schedule == "dampened":  # the reference's dampened_state_mixer
        return beta / (1 + n)
    if schedule == "sqrt":
        return beta / torch.sqrt(1 + n)
    return beta * (1 - n / r).clamp(min=0)  # linear: reaches 0 once a position has had r recurrences


def noised(rule: Rule, args: tuple[Tensor, ...]) -> Tensor:
    """With β > 0, the window's states noised, z ← (1 − β_t)·z + β_t·InitState(α), β_t by the schedule and the
    state's recurrences so far. Args: the states and ages ``(B, T, …)`` and (α > 0) the noise."""
    z, age, *noise = args
    b_t = beta_per_position(rule.p.beta, rule.p.beta_schedule, age.to(z.dtype), rule.p.r)[..., None]
    return (1 - b_t) * z + b_t * (noise[0] if rule.noise else torch.zeros_like(z))


def advance(c: tuple[Rule, bool], run: Any, *args: Tensor) -> tuple[Tensor, ...]:
    """Steps 4-6 of the sampler after the model call, for every slot at once: the proposals, the freeze decision
    (δ per state, k*, the recurrence budget), growth by ``growth`` states, the window's move; written into the batch
    state in place (its buffers keep their shapes, so nothing is allocated for them and views of them stay valid).

    Args: the state (:func:`state_names`: ``seq`` and ``unchanged`` (B, S), the window buffers (B, rows, …), rows ≥
    Tg); the model's states ``z`` (B, T, E), ``logits`` (B, T, V) and, with momentum, the embeddings ``e`` it used;
    ``ptr`` (4, B, 1) (:data:`PTR`); the grown window's row numbers ``rows_g`` (1, Tg) (0 … Tg-1, Tg > T or Tg = T = the
    window; the step's own rows are made here, a compiled program's iota rather than two more arguments); the rule's
    extras: sampled proposals, new states' noise. Writes the state (the window's first Tg rows) and returns the
    read-back ``(B, k)`` (:data:`READ`) and, with adaptive freezing and ``traced``, δ ``(B, T)`` (for traces; one
    output less to allocate on every untraced step). ``c``: the rule and ``traced``; a step function
    (:mod:`recdiff.engine.step`) that needs nothing of the runner ``run``."""
    rule, traced = c
    names = state_names(rule)
    s = dict(zip(names, args))
    z, logits, *rest = args[len(names):]
    e = rest.pop(0) if rule.p.eta > 0 else None
    ptr, rows_g, *rest = rest
    new = logits.argmax(-1) if rule.greedy else rest.pop(0)  # (B, T): proposals for tokens start+1 … start+T
    grow_noise = rest.pop(0) if rule.noise else None
    T = z.shape[1]
    rows = torch.arange(T, device=z.device)[None]  # (1, T): 0 … T-1
    rows_next = rows + 1
    start, W, growth, lag = ptr.unbind(0)  # (B, 1) each
    valid = rows < W  # (B, T): the states refined this step
    seq, unchanged = s["seq"], s["unchanged"]

    # 4. the proposals replace the tokens they predict, counted as unchanged where equal (a token is compared where a
    # state consumed it: rows < W-1)
    tpos = start + rows_next
    old = seq.gather(1, tpos)
    tok = torch.where(valid, new, old)
    # (the positions are distinct: a scatter of gathered counts, which inductor fuses; scatter_add is a kernel of its
    # own)
    counts = unchanged.gather(1, tpos) + ((old == new) & (rows_next < W)).long()

    # 6a. convergence: δ = ‖z − z_prev‖/‖z‖ per valid state against its stored value (reference rule: the row `lag`
    # further, as the authors' code indexes the states it kept from the old start); k* by the freeze rule
    delta = None
    if rule.adaptive:
        if rule.reference:
            src = (rows + lag).clamp(max=s["z"].shape[1] - 1)
            prev = s["z"].gather(1, src[..., None].expand(-1, -1, z.shape[-1]))
            compared = rows < W - lag
        else:
            prev, compared = s["z"][:, :T], valid
        delta = _relative_change(z, prev)  # (B, T)
        below = (delta < rule.p.epsilon) & compared
        if rule.prefix:  # eq. (conv): the leading run of converged states, up to the first that is not (a reduction
            # inductor fuses, where a cumprod is a kernel of its own)
            n_conv = torch.where(below, T, rows).amin(1, keepdim=True)
        else:  # Algorithm 2's wording: up to the last converged state
            n_conv = (below * rows_next).amax(1, keepdim=True)
        # paper: the converged states leave, each freezing the token it predicts; reference: the last converged state
        # stays, and only the token it consumes freezes
        shift = (n_conv - 1).clamp(min=0) if rule.reference else n_conv
    else:
        shift = torch.zeros_like(W)

    # 6b. the states' sampler recurrences; the recurrence budget: states with r_freeze leave (the oldest first, so a
    # prefix)
    if rule.ages:
        age = s["age"][:, :T] + rule.p.r_inner
        if rule.r_freeze is not None:
            shift = torch.maximum(shift, ((age >= rule.r_freeze) & valid).sum(1, keepdim=True))

    # 5./6c. the window moves by `shift` rows and grows: new row t is the refined state of row t + shift where that is
    # valid, else a grown state: InitState(α) (zeros at α = 0), or under continuous compute the state `growth` rows
    # to the left of it (where there is one). Rows past the grown front take the same values (nothing reads them). A
    # wavefront that froze whole (possible only without growth) restarts with one state after the new token: zeros,
    # or with α > 0 its InitState, which the host writes before the next step
    source = rows_g + shift  # (B, Tg): the row each new row comes from
    kept = source < W
    at = source.clamp(max=T - 1)
    idx = at[..., None].expand(-1, -1, z.shape[-1])
    fresh: Tensor | float = _rows_at(grow_noise, source, W).to(z.dtype) if rule.noise else 0.0
    if rule.p.continuous_compute:
        left = z.gather(1, (source - growth).clamp(0, T - 1)[..., None].expand(-1, -1, z.shape[-1]))
        fresh = torch.where((W >= growth)[..., None], left, fresh)
    kept3 = kept[..., None]
    z_next = torch.where(kept3, z.gather(1, idx), fresh)
    if rule.p.continuous_compute:
        z_next = torch.where(((shift == W + growth) & (rows_g == 0))[..., None], 0.0, z_next)
    e_next = torch.where(kept3, (rule.p.eta * e).gather(1, at[..., None].expand(-1, -1, e.shape[-1])), 0.0) \
        if e is not None else None  # (the embeddings' width: a core of its own width has other states')
    age_next = torch.where(kept, age.gather(1, at), 0) if rule.ages else None

    # the writes, after every read of the state they overwrite, by index: a compiled program makes them in place (a
    # scatter it made into a copy of the whole buffer, copied back), and a slice of a buffer's rows by another
    # argument's size would be specialised on
    slot = torch.arange(seq.shape[0], device=seq.device)[:, None]  # (B, 1)
    seq.index_put_((slot, tpos), tok)
    if rule.p.pad_id is not None and rule.p.headway > 1:  # the extras after the first new position hold pad_id
        extra = rows_g[:, : rule.p.headway - 1]
        pad_at = start + W + 1 + extra
        seq.index_put_((slot, pad_at), torch.where(extra < growth - 1, rule.p.pad_id, seq.gather(1, pad_at)))
    unchanged.index_put_((slot, tpos), counts)
    window = rows_g[0]
    s["z"].index_copy_(1, window, z_next)
    if e_next is not None:  # η·e of this step's valid rows (zero elsewhere): the next step's momentum term
        s["e"].index_copy_(1, window, e_next)
    if age_next is not None:
        s["age"].index_copy_(1, window, age_next)

    read = torch.cat([shift, tok], 1) if rule.tokens else torch.cat([shift], 1)
    return (read,) if delta is None or not traced else (read, delta)


def _relative_change(new: Tensor, old: Tensor) -> Tensor:
    """δ = ‖new − old‖ / ‖new‖ per row, in float32 (:func:`recdiff.model.relative_change`, without its conversions
    where the states are float32 already)."""
    if new.dtype != torch.float32:
        new, old = new.float(), old.float()
    return (new - old).norm(dim=-1) / new.norm(dim=-1)


def _rows_at(src: Tensor, rows: Tensor, first: Tensor) -> Tensor:
    """``out[b, t] = src[b, rows[b, t] - first[b]]`` (clamped to ``src``'s rows), ``first`` (B, 1)."""
    idx = (rows - first).clamp(0, src.shape[1] - 1)
    return src.gather(1, idx[..., None].expand(-1, -1, src.shape[-1]))
