"""The search's own proposals before Optuna's: the paper's defaults, then each numeric knob moved alone one step
either way from the best setting so far, among the values ``recdiff/params.py`` declares for it
(``study.space.<knob>.values``: r′ 1, 2, 4, 8; ε 0.01, 0.03, 0.1; …). When a move becomes the best (the knee,
:func:`recdiff.tune.choice.knee`), the moves go on around it: a climb, one knob at a time, that a small budget learns
most from (each trial says what one knob does here, and a tie goes to the setting that changes fewest knobs). Once
every move around the best has run, the study's Optuna sampler proposes (``study.algorithm``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from recdiff.tune.choice import Measured, feasible, knee
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


def next_setting(tp: TunePlan, done: Sequence[Measured], floor: float,
                 seen: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The next setting to run: the defaults, else a move around the best feasible setting so far that the study
    has not seen (``seen``: the parameters of every trial it holds); None when every such move has run."""
    paper = tp.paper()
    best = knee([m for m in done if feasible(m, floor)], floor, paper)
    for params in [paper, *steps(tp, best.params if best else paper)]:
        if params not in seen:
            return params
    return None
