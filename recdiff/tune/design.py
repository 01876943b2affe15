"""The search's own proposals before Optuna's: the paper's defaults, LoopSpec at its defaults (r_draft = 4, one early
readout) and its draft depth one step either way, then each knob of the best setting's sampler moved alone one step
either way, among the values that knob steps through (:meth:`recdiff.tune.plan.TunePlan.ladders`: a diffusion knob's
declared ``study.space.<knob>.values``, r′ 1, 2, 4, 8; ε 0.01, 0.03, 0.1; …; LoopSpec's readout depths at the
study's r) and valid with the others held. The center is the defaults until a setting of either sampler beats it
beyond both intervals (its lower end above the center's upper end); then the moves go on around that one: a climb,
one knob at a time, that a small budget learns most from (each trial says what one knob does here; a knob that
changes nothing does not move the center by a lucky timing). Once every move around the center has run, the study's
Optuna sampler proposes (``study.algorithm``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from recdiff.tune.choice import Measured, feasible
from recdiff.tune.plan import TunePlan


def neighbours(ladder: list[Any], value: Any) -> list[Any]:
    """The values next to ``value`` on either side of ``ladder`` (ordered; None, where it is one, first); from a value
    between two of them, each of them."""
    if value in ladder:
        i = ladder.index(value)
        return ladder[max(i - 1, 0):i] + ladder[i + 1:i + 2]
    if value is None:
        return []
    numbers = [v for v in ladder if v is not None]
    return [v for v in numbers if v < value][-1:] + [v for v in numbers if v > value][:1]


def steps(tp: TunePlan, center: dict[str, Any]) -> list[dict[str, Any]]:
    """``center`` with one knob of its sampler moved to the next value on either side among those valid with the
    other knobs held, in an order shuffled with ``study.seed``."""
    moves = []
    for key, ladder in tp.ladders(center["sampler"]).items():
        valid = [v for v in ladder if v == center[key] or tp.sampler_of({**center, key: v}).complaint() is None]
        moves += [{**center, key: v} for v in neighbours(valid, center[key])]
    random.Random(tp.search.study.seed).shuffle(moves)
    return moves


def first(tp: TunePlan) -> list[dict[str, Any]]:
    """The search's first settings: the paper's defaults; then, where LoopSpec is searched, its defaults and its first
    knob (r_draft) one step either way."""
    out = [tp.paper()]
    if tp.options.loopspec:
        start = tp.setting(tp.loopspec())
        key = tp.options.loopspec[0]
        out += [start, *[m for m in steps(tp, start) if m[key] != start[key]]]
    return out


def center(done: Sequence[Measured], floor: float, paper: dict[str, Any]) -> dict[str, Any]:
    """The climb's center: the defaults, then each feasible setting (in the order they ran) whose speed-up interval
    lies wholly above the center's."""
    here: Measured | None = None
    for m in done:
        if feasible(m, floor) and (m.params == paper if here is None else m.speedup_lo > here.speedup_hi):
            here = m
    return here.params if here is not None else paper


def next_setting(tp: TunePlan, done: Sequence[Measured], floor: float,
                 seen: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The next setting to run: the first ones (:func:`first`), else a move around the center that the study has not
    seen (``seen``: the setting of every trial it holds); None when every such move has run."""
    for params in [*first(tp), *steps(tp, center(done, floor, tp.paper()))]:
        if params not in seen:
            return params
    return None
