"""The search's own proposals before Optuna's: the paper's defaults, then each numeric knob moved alone one step
either way from the center, among the values ``recdiff/params.py`` declares for it (``study.space.<knob>.values``:
r′ 1, 2, 4, 8; ε 0.01, 0.03, 0.1; …). The center is the defaults until a setting beats it beyond both intervals (its
lower end above the center's upper end); then the moves go on around that one: a climb, one knob at a time, that a
small budget learns most from (each trial says what one knob does here; a knob that changes nothing does not move
the center by a lucky timing). Once every move around the center has run, the study's Optuna sampler proposes
(``study.algorithm``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from recdiff.tune.choice import Measured, feasible
from recdiff.tune.plan import TunePlan


def steps(tp: TunePlan, center: dict[str, Any]) -> list[dict[str, Any]]:
    """``center`` with one numeric knob moved to the declared value next to it on either side (from a value between
    two declared ones, to each of them), in an order shuffled with ``study.seed``."""
    plan = tp.search
    moves = []
    for key in plan.study.search:
        values = sorted(plan.study.space[key].values or [])
        below = [v for v in values if v < center[key]][-1:]
        above = [v for v in values if v > center[key]][:1]
        moves += [{**center, key: v} for v in below + above]
    random.Random(plan.study.seed).shuffle(moves)
    return moves


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
    """The next setting to run: the defaults, else a move around the center that the study has not seen (``seen``:
    the parameters of every trial it holds); None when every such move has run."""
    paper = tp.paper()
    for params in [paper, *steps(tp, center(done, floor, paper))]:
        if params not in seen:
            return params
    return None
