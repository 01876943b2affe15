"""The diffusion sampler's host half: one sequence's record (:class:`SlotRecord`), kept from each step's read-back.

It holds the pointers the next step hands in and the scheduler needs (the wavefront's start and width: the next
step's shapes, admissions and retirements), the stop checks and the counts the sequence's result reports
(recurrences and stability per position, the step that froze each token).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from recdiff.engine import Record
from recdiff.trace import TraceRecorder


@dataclass(kw_only=True)
class SlotRecord(Record):
    """One sequence's host-side record, kept from each step's read-back (the only device read of a step): the
    pointers the next step hands in, and what its result reports."""

    L: int  # prompt length
    max_new: int
    max_steps: int
    max_len: int  # the furthest the front may reach: the block, or the answer's length plus the window
    W: int = 1  # states in the wavefront
    n_frozen: int = 0  # frozen tokens, prompt included (the wavefront starts at n_frozen - 1)
    lag: int = 0  # the previous step's shift (the reference rule compares with the rows it moved past)
    seq_end: int = 0  # exclusive end of the current sequence (frozen tokens and proposals)
    empty: bool = False  # the whole wavefront froze in the last step (with α > 0: a fresh state is drawn)
    spans: list[tuple[int, int, int]] = field(default_factory=list)  # per step: the states refined (start, W), growth
    frozen_at: list[int] = field(default_factory=list)  # per new token: the step that froze it (0: the prefill)
    # tokens: the new tokens frozen so far, kept only with stops (the result's come from the batch state)
    hit_cap: bool = False
    recorder: TraceRecorder | None = None  # only for sequences asked to be traced

    @property
    def steps(self) -> int:
        return len(self.spans)

    def advanced(self, shift: int, W: int, growth: int) -> None:
        """Record a step that refined the ``W`` states from the front's start, grew the wavefront by ``growth``
        states (at most the headway) and froze the tokens its first ``shift`` states predict."""
        before = self.n_frozen
        self.spans.append((before - 1, W, growth))
        self.n_frozen = before + shift
        self.seq_end = max(before - 1 + W + growth, self.n_frozen)
        self.empty = shift == W + growth
        self.W, self.lag = max(W + growth - shift, 1), shift
        if shift:
            self.frozen_at += [len(self.spans)] * shift

    def counter(self, n: int, r: int, r_inner: int) -> np.ndarray:
        """Core recurrences of the states at positions 0 … n-1: r for the prompt (the prefill), r' per step for a
        position in the wavefront. A state is refined in a run of consecutive steps (the wavefront's start and end
        never move back), so its count is the steps that started at or before it less those that ended before."""
        p = np.arange(n)
        starts = np.array([s for s, _, _ in self.spans], dtype=np.int64)
        ends = np.array([s + w for s, w, _ in self.spans], dtype=np.int64)
        steps = np.searchsorted(starts, p, side="right") - np.searchsorted(ends, p, side="right")
        return np.where(p < self.L, r, r_inner * steps)

    def stability(self, unchanged: np.ndarray) -> np.ndarray:
        """Stability per position after the steps so far: the steps at which the token's proposal was unchanged,
        plus those at which it was frozen already (every step for the prompt and the prefill's token)."""
        f = np.full(len(unchanged), self.steps, dtype=np.int64)  # not frozen (yet): no frozen steps
        f[: self.L] = 0
        n = min(len(f) - self.L, len(self.frozen_at))
        f[self.L : self.L + n] = self.frozen_at[:n]
        return unchanged + (self.steps - f)
