"""The tune's time budget (``tune.time_budget_s``): the whole command, search, confirmation and table, within it.

The search starts a trial only while the time left holds that trial (half again the median of the search's trials so
far) and the confirmation after it (:func:`confirmation_s`); a trial that runs past the time the search may use is
cut there (``recdiff.trial.deadline``: FAIL, ``timeout``), so the confirmation always has its time.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence

MARGIN = 1.5          # the confirmation's estimate is scaled by this: the machine's load may rise meanwhile


class Budget:
    """Seconds since the command started, and how many are left (infinite without a budget)."""

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic,
                 start: float | None = None) -> None:
        self.seconds, self.clock = seconds, clock
        self.start = clock() if start is None else start

    def elapsed(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        return math.inf if self.seconds is None else self.seconds - self.elapsed()

    def fits(self, seconds: float) -> bool:
        return self.left() >= seconds

    def shown(self) -> str:
        used = _mmss(self.elapsed())
        return used if self.seconds is None else f"{used} of {_mmss(self.seconds)}"


def _mmss(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def next_trial_s(durations: Sequence[float], reference_s: float) -> float:
    """What the next search trial is expected to take: half again the median of the trials so far (the reference's
    trial, on the same slice, before there is any)."""
    return 1.5 * (statistics.median(durations) if durations else reference_s)


def confirmation_s(reference_s: float, others_s: Sequence[float | None], factor: float) -> float:
    """The held-out confirmation's expected seconds: the reference and the others (each searched sampler's defaults,
    the chosen setting), each as long as on the searched slice times ``factor`` (the held-out slice's size and rounds
    over the searched one's), with a margin. An unknown duration counts as the reference's (static AR at r=32 is the
    slowest of them as a rule)."""
    return MARGIN * factor * (reference_s + sum(reference_s if s is None else s for s in others_s))
