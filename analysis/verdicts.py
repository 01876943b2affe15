"""A claim's verdict: the checks computed from the data, each passed, failed or inconclusive (its interval on both
sides of the threshold), and the claim's status from them: agrees, disagrees, inconclusive, or n/a when the data
cannot test it (:mod:`analysis.claims` says how each claim is judged)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import polars as pl

from analysis.intervals import all_of

STATUSES = ("agrees", "disagrees", "inconclusive", "n/a")
_MARK = {True: "✓", False: "✗", None: "?"}


@dataclass(frozen=True)
class Check:
    text: str              # what was measured, with the numbers and their intervals
    passed: bool | None    # None: inconclusive, the interval straddles the threshold


@dataclass
class Verdict:
    checks: list[Check] = field(default_factory=list)
    reason: str | None = None  # why the data cannot test the claim (status n/a)

    @property
    def status(self) -> str:
        if not self.checks:
            return "n/a"
        outcome = all_of([c.passed for c in self.checks])
        return "agrees" if outcome is True else "disagrees" if outcome is False else "inconclusive"

    @property
    def evidence(self) -> str:
        if not self.checks:
            return self.reason or "not testable on this data"
        return "; ".join(f"{c.text} {_MARK[c.passed]}" for c in self.checks)

    @property
    def disagreement(self) -> float:
        """Share of failed checks (0 agrees … 1 every check fails); n/a and inconclusive checks count as 0."""
        return sum(c.passed is False for c in self.checks) / len(self.checks) if self.checks else 0.0


def count_outcomes(verdicts: Sequence[Verdict]) -> dict[str, int]:
    """How many verdicts have each status, in `STATUSES` order."""
    return {s: sum(v.status == s for v in verdicts) for s in STATUSES}


Judge = Callable[[pl.DataFrame], Verdict]


class Untestable(Exception):
    """The data cannot test this claim (the message says why)."""


def judged(fn: Callable[[pl.DataFrame], list[Check]]) -> Judge:
    def judge(df: pl.DataFrame) -> Verdict:
        try:
            return Verdict(fn(df))
        except Untestable as exc:
            return Verdict(reason=str(exc))
    judge.__name__ = judge.__qualname__ = fn.__name__
    judge.__doc__ = fn.__doc__
    return judge
