"""Speculative rejection sampling with up to two proposals, as LoopSpec samples (``loopspec/sampling/rejection.py``):
the committed token's distribution is exactly the full-depth readout's, whatever the early readouts proposed.

With the full-depth distribution ``p`` (the target), q1's distribution ``q1`` and its draw ``x``:

1. accept ``x`` with probability ``min(1, p[x] / q1[x])``;
2. else the target becomes the residual ``f = norm(max(p - q1, 0))`` (the conditional law of the token given the
   rejection); a second proposal ``y``, drawn from ``r`` (:func:`second_proposal`: ``norm(max(q2 - q1, 0))`` without
   ``x``), is accepted with probability ``min(1, f[y] / r[y])``;
3. else the token is drawn from ``norm(max(f - r, 0))`` (from ``f`` when there was no second proposal).

Each step is the standard speculative-sampling step (Leviathan et al. 2023) against the target of the step before,
so the token is distributed as ``p``. Distributions are float32 rows that need not sum to 1 (a top-p cut); every
draw comes from the sequence's own generator, in a fixed order.
"""

from __future__ import annotations

import torch
from torch import Tensor


def draw(probs: Tensor, generator: torch.Generator) -> int:
    """One token from unnormalised probabilities ``(V,)``."""
    return int(torch.multinomial(probs, 1, generator=generator))


def uniform(like: Tensor, generator: torch.Generator) -> float:
    return float(torch.rand((), generator=generator, device=like.device))


def residual(target: Tensor, proposal: Tensor) -> Tensor | None:
    """``norm(max(target - proposal, 0))``, or None where that has no mass (the proposal covers the target)."""
    t, q = target / target.sum(), proposal / proposal.sum()
    rest = (t - q).clamp_min(0)
    mass = float(rest.sum())
    return rest / mass if mass > 0 else None


def second_proposal(q1: Tensor, q2: Tensor, x: int) -> Tensor | None:
    """The distribution q2 proposes from: where q2 puts more mass than q1, without q1's token ``x``; None (no second
    proposal) when that has no mass or q2 does not think less of ``x`` than q1 (then the first proposal stands)."""
    a, b = q1 / q1.sum(), q2 / q2.sum()
    if not b[x] < a[x]:
        return None
    rest = (b - a).clamp_min(0)
    rest[x] = 0
    mass = float(rest.sum())
    return rest / mass if mass > 0 else None


def verify(p: Tensor, q1: Tensor, x: int, r: Tensor | None, y: int | None, generator: torch.Generator
           ) -> tuple[int, int]:
    """The committed token and which proposal it was (1: q1's ``x``, 2: q2's ``y`` drawn from ``r``, 0: neither)."""
    pn, qn = p / p.sum(), q1 / q1.sum()
    if uniform(p, generator) < float(pn[x] / qn[x]):
        return x, 1
    f = residual(pn, qn)
    if f is None:  # rounding: a rejection where q1 covers p (cannot happen exactly); the target itself
        f = pn
    if r is not None and y is not None:
        if uniform(p, generator) < float(f[y] / r[y]):
            return y, 2
        rest = residual(f, r)
        return draw(f if rest is None else rest, generator), 0
    return draw(f, generator), 0
