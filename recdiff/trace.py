"""The diffusion sampler's per-step record: what the token-stability pictures are drawn from.

One row per sampler step (recorded at the end of the step by a :class:`TraceRecorder`), columns = absolute
positions (prompt included). Compact on purpose: int32 tokens and counters, float16 latent changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class DiffusionTrace:
    tokens: np.ndarray  # [S, P] int32: current sequence (frozen + proposals), -1 where not yet written
    frozen: np.ndarray  # [S] int32: frozen tokens (prompt included) after the step
    counter: np.ndarray  # [S, P] int32: cumulative core recurrences per position
    stability: np.ndarray  # [S, P] int32: steps so far at which the position's token was unchanged (frozen count)
    delta: np.ndarray  # [S, P] float16: ‖z − z_prev‖/‖z‖ this step, NaN where not computed
    prompt_len: int

    @property
    def steps(self) -> int:
        return int(self.tokens.shape[0])

    def save(self, path: str | Path, decode: Callable[[int], str] | None = None) -> Path:
        """Write the arrays; with ``decode`` also each token id's text (``text_ids`` → ``text``), so the pictures
        can print tokens without the tokenizer that made them."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        extra = {}
        if decode is not None:
            ids = np.unique(self.tokens[self.tokens >= 0])
            extra = {"text_ids": ids.astype(np.int32), "text": np.array([decode(int(i)) for i in ids], dtype=np.str_)}
        np.savez_compressed(path, tokens=self.tokens, frozen=self.frozen, counter=self.counter,
                            stability=self.stability, delta=self.delta,
                            prompt_len=np.int32(self.prompt_len), **extra)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "DiffusionTrace":
        with np.load(path) as f:
            return cls(tokens=f["tokens"], frozen=f["frozen"], counter=f["counter"], stability=f["stability"],
                       delta=f["delta"], prompt_len=int(f["prompt_len"]))


class TraceRecorder:
    """Collects one sequence's :class:`DiffusionTrace`, one row per step; only used with trace=True, so host copies
    here are fine."""

    def __init__(self, prompt_len: int) -> None:
        self.prompt_len = prompt_len
        self.rows: list[tuple[np.ndarray, int, np.ndarray, np.ndarray, np.ndarray]] = []

    def record(self, seq: np.ndarray, n_frozen: int, counter: np.ndarray, stable: np.ndarray, delta: np.ndarray | None,
               lo: int) -> None:
        """One step: the sequence, frozen count, counters and stability so far, and δ of the states compared from
        position ``lo`` on."""
        d = np.full(len(counter), np.nan, dtype=np.float16)
        if delta is not None:
            d[lo : lo + len(delta)] = delta
        self.rows.append((seq.astype(np.int32), n_frozen, counter.astype(np.int32), stable.astype(np.int32), d))

    def finish(self) -> DiffusionTrace:
        S, P = len(self.rows), max((len(r[0]) for r in self.rows), default=0)
        tokens = np.full((S, P), -1, dtype=np.int32)
        counter, stability = np.zeros((S, P), dtype=np.int32), np.zeros((S, P), dtype=np.int32)
        delta = np.full((S, P), np.nan, dtype=np.float16)
        for i, (t, _, c, st, d) in enumerate(self.rows):
            tokens[i, : len(t)], counter[i, : len(c)], stability[i, : len(st)], delta[i, : len(d)] = t, c, st, d
        frozen = np.array([r[1] for r in self.rows], dtype=np.int32)
        return DiffusionTrace(tokens=tokens, frozen=frozen, counter=counter, stability=stability, delta=delta,
                              prompt_len=self.prompt_len)
