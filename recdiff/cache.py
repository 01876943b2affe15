"""Preallocated KV cache owned by the model.

One buffer ``[slots, B, H_kv, S_max, head_dim]`` for keys and one for values. A *slot* is one attention layer
instance: every prelude and coda layer has one; the core block has one per layer (``shared``: each new
recurrence overwrites it, so a position keeps the K/V of its most recent recurrence — the paper's KV-cache
sharing) or one per layer and recurrence step (``per_step``: memory grows with r).

Positions are written in place by index. ``length`` is the number of committed positions: rolling back
(speculative decoding) or freezing (the diffusion sampler's wavefront) only moves this pointer; stale entries
beyond it are never read and are overwritten later.

``per_step`` and adaptive compute: a position that exited at step k has no entry for deeper steps. Attention at
a deeper step then leaves that position out (it is masked), exactly as the authors' reference "full" cache does.
The ``shared`` policy has no such gap (the position contributes its last recurrence) and is the one to use with
adaptive compute and the diffusion sampler.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

from recdiff.config import RecurrentConfig
from recdiff.errors import RecdiffError

CachePolicy = Literal["shared", "per_step"]
POLICIES = ("shared", "per_step")


class KVCache:
    def __init__(
        self,
        config: RecurrentConfig,
        max_len: int,
        policy: CachePolicy = "shared",
        max_steps: int = 1,
        batch_size: int = 1,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if policy not in POLICIES:
            raise RecdiffError(f"unknown kv_cache {policy!r}; choose one of {', '.join(POLICIES)}")
        if max_len > config.block_size:
            raise RecdiffError(
                f"sequence of {max_len} positions exceeds the model's block_size {config.block_size}; "
                "shorten the prompt or max_new_tokens"
            )
        self.policy = policy
        self.max_len = max_len
        self.max_steps = max_steps
        self.n_prelude = config.n_layers_in_prelude
        self.n_core = config.n_layers_in_recurrent_block
        core_slots = self.n_core * (max_steps if policy == "per_step" else 1)
        self.n_slots = self.n_prelude + core_slots + config.n_layers_in_coda
        self._coda0 = self.n_prelude + core_slots
        shape = (self.n_slots, batch_size, config.num_key_value_heads, max_len, config.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.length = 0
        # per_step only: core iterations written for each position (host side, to build masks without syncs)
        self.depth = np.zeros(max_len, dtype=np.int64) if policy == "per_step" else None

    # slot indices -------------------------------------------------------------------------------------------
    def prelude_slot(self, layer: int) -> int:
        return layer

    def core_slot(self, step: int, layer: int) -> int:
        if self.policy == "shared":
            return self.n_prelude + layer
        if step >= self.max_steps:
            raise RecdiffError(f"per_step cache was set up for {self.max_steps} recurrences, step {step + 1} requested")
        return self.n_prelude + step * self.n_core + layer

    def coda_slot(self, layer: int) -> int:
        return self._coda0 + layer

    # writes and reads ---------------------------------------------------------------------------------------
    def write(self, slot: int, start: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v ``(B, H, T, D)`` at positions ``start … start+T-1``; return all K/V up to there."""
        end = start + k.shape[2]
        if end > self.max_len:
            raise RecdiffError(f"KV cache holds {self.max_len} positions, position {end - 1} requested")
        self.k[slot, :, :, start:end] = k
        self.v[slot, :, :, start:end] = v
        return self.k[slot, :, :, :end], self.v[slot, :, :, :end]

    def missing_at_step(self, step: int, start: int) -> np.ndarray | None:
        """per_step: boolean mask of earlier positions (< start) that have no entry for this step, or None."""
        if self.depth is None or start == 0:
            return None
        missing = self.depth[:start] <= step
        return missing if missing.any() else None

    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes
