"""The diffusion sampler's per-step record: what the token-stability pictures are drawn from.

One row per sampler step (recorded at the end of the step), columns = absolute positions (prompt included).
Compact on purpose: int32 tokens and counters, float16 latent changes.
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
            return cls(tokens=f["tokens"], frozen=f["frozen"], counter=f["counter"], stability=f["stability"], delta=f["delta"],
                       prompt_len=int(f["prompt_len"]))
