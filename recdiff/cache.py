"""Preallocated KV cache for a batch of sequences ("slots"), owned by the engine.

One key and one value buffer ``[slots, positions, H_kv, head_dim]`` per *layer slot*: one attention
layer instance: every prelude and coda layer has one; the core block has one per layer (``shared``: each new
recurrence overwrites it, so a position keeps the K/V of its most recent recurrence — the paper's KV-cache sharing)
or one per layer and recurrence step (``per_step``: memory grows with r).

Every sequence owns one row and writes its positions in place by index. Attention masks by absolute position
(a query at p sees keys 0 … p of its own row), so rolling back (speculative decoding) or freezing (the diffusion
sampler's wavefront) only moves the sampler's pointers; stale entries beyond them are never read and are
overwritten later. Shapes never change during a run, which is what compiled steps and CUDA graphs need.

``per_step`` and adaptive compute: a position that exited at step k has no entry for deeper steps. Attention at a
deeper step then leaves that position out (it is masked), exactly as the authors' reference "full" cache does.
The ``shared`` policy has no such gap (the position contributes its last recurrence) and is the one to use with
adaptive compute and the diffusion sampler.

``lanes`` (the pipelined self-speculative sampler, :mod:`recdiff.samplers.loopspec`): ``per_step``'s planes, one per
recurrence, and the coda's too, one per readout depth (:data:`READOUTS`: the first and second early readouts and the
final one), so that every depth has its own K/V timeline. Several lanes of one sequence run side by side at their
own depths, some of them at the same position on different branches: a call then names each row's physical index
(``Call.slot``, apart from the position RoPE and the mask use) and which keys each row sees (``visible``: its
committed prefix and its branch's ancestors), and each row reads and writes its own plane (a step per row).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from recdiff.errors import RecdiffError
from recdiff.model_config import RecurrentConfig

CachePolicy = Literal["shared", "per_step", "lanes"]
POLICIES = ("shared", "per_step", "lanes")
READOUTS = 3  # coda planes under "lanes": the first early readout, the second, the final one


@dataclass
class Call:
    """Where one model call sits in the cache: ``B`` rows × ``T`` positions each.

    ``rows`` maps call rows to cache rows (None: call row b is cache row b, every row); ``pos`` holds absolute
    positions; ``write`` (None: all) says which rows store their K/V (adaptive exits keep a finished row's
    entries); ``freqs`` and ``mask`` are computed once per call by :func:`make_call`; ``slot`` (None: ``pos``) the
    physical index each position's K/V go to (a lane on a branch of its own sits apart from its position)."""

    rows: Tensor | None  # (B,) long
    b_idx: Tensor  # (B, T) long: cache row of every position
    pos: Tensor  # (B, T) long
    freqs: Tensor  # (B, T, 1, head_dim/2, 2)
    mask: Tensor  # (B, 1, T, S) bool: keys each query may see
    write: Tensor | None = None  # (B,) bool
    slot: Tensor | None = None  # (B, T) long: physical index in the cache row (None: pos)

    @property
    def where(self) -> Tensor:
        """``(B, T)``: each position's physical index in its cache row (``slot``, else its position)."""
        return self.pos if self.slot is None else self.slot


class SlotKV:
    def __init__(
        self,
        config: RecurrentConfig,
        slots: int,
        length: int,
        policy: CachePolicy = "shared",
        max_steps: int = 1,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        tokens: bool = False,
    ) -> None:
        """``tokens``: also keep each position's token (a model with value embeddings reads them in later layers
        of the position's calls: :meth:`recdiff.model.RecurrentDepthModel.embed` writes them)."""
        if policy not in POLICIES:
            raise RecdiffError(f"unknown kv_cache {policy!r}; choose one of {', '.join(POLICIES)}")
        self.policy, self.slots, self.length, self.max_steps = policy, slots, length, max_steps
        self.n_prelude = config.n_layers_in_prelude
        self.n_core = config.n_layers_in_recurrent_block
        self.n_slots = self.n_prelude + self.n_core + config.n_layers_in_coda
        # separate tensors per layer slot, written in place by (row, position): compiled code then updates only the
        # entries it writes (a write into a view of one shared buffer would copy the whole buffer back). Under
        # per_step a core layer's buffer has one plane per recurrence, (max_steps, slots, S, H, D), so that a
        # compiled recurrence can pick its plane with a step tensor; under lanes a coda layer's has one per readout.
        core_heads = config.core_config().num_key_value_heads  # a core of its own width has its own heads
        self.k, self.v = [], []
        for i in range(self.n_slots):
            planes = self.planes(i)
            heads = core_heads if self.n_prelude <= i < self.n_prelude + self.n_core else config.num_key_value_heads
            shape = (slots, length, heads, config.head_dim)
            s = shape if planes is None else (planes, *shape)
            self.k.append(torch.zeros(s, device=device, dtype=dtype))
            self.v.append(torch.zeros(s, device=device, dtype=dtype))
        # per_step only: core recurrences written for each position, to mask deeper steps a position never ran
        self.depth = torch.zeros((slots, length), device=device, dtype=torch.int32) if policy == "per_step" else None
        self.tokens = torch.zeros((slots, length), device=device, dtype=torch.long) if tokens else None

    def planes(self, slot: int) -> int | None:
        """Planes of a layer slot's buffer (None: one, unstacked)."""
        core = self.n_prelude <= slot < self.n_prelude + self.n_core
        if core and self.policy in ("per_step", "lanes"):
            return self.max_steps
        if slot >= self.n_prelude + self.n_core and self.policy == "lanes":
            return READOUTS
        return None

    # layer-slot indices ---------------------------------------------------------------------------------
    def core_slot(self, layer: int) -> int:
        return self.n_prelude + layer

    def coda_slot(self, layer: int) -> int:
        return self.n_prelude + self.n_core + layer

    # writes and reads -----------------------------------------------------------------------------------
    def update(self, slot: int, call: Call, k: Tensor, v: Tensor, step: int | Tensor = 0) -> tuple[Tensor, Tensor]:
        """Store k, v ``(B, T, H, D)`` at the call's positions (its ``slot`` where given); in a stacked buffer in the
        plane ``step``: an int, a 0-d tensor inside compiled code, or one plane per row ``(B,)`` (lanes at their
        own depths). Return the call rows' keys and values ``(B, H, S, D)`` for attention."""
        kb, vb = self.k[slot], self.v[slot]  # (slots, S, H, D), or (planes, slots, S, H, D)
        if kb.dim() == 5 and not isinstance(step, Tensor):
            if step >= kb.shape[0]:
                raise RecdiffError(f"per_step cache was set up for {kb.shape[0]} recurrences, "
                                   f"step {step + 1} requested")
            kb, vb = kb[step], vb[step]
        where = call.where
        index: tuple[Tensor, ...] = (call.b_idx, where)
        if kb.dim() == 5:
            plane = step if step.dim() == 0 else step[:, None]  # type: ignore[union-attr]
            index = (plane.expand_as(where), *index)
        if call.write is not None:  # rows that exited keep what they wrote last
            w = call.write[:, None, None, None]
            k = torch.where(w, k, kb[index])
            v = torch.where(w, v, vb[index])
        kb.index_put_(index, k)
        vb.index_put_(index, v)
        n = call.mask.shape[-1]  # the positions this call attends to (a prefix of the cache)
        if kb.dim() == 5 and step.dim() == 1:  # type: ignore[union-attr]  # each row its own plane: one gather
            at = step * kb.shape[1] + call.b_idx[:, 0]   # over (plane, row) flattened
            kb, vb = kb.flatten(0, 1)[:, :n].index_select(0, at), vb.flatten(0, 1)[:, :n].index_select(0, at)
            return kb.transpose(1, 2), vb.transpose(1, 2)
        if kb.dim() == 5:  # a step tensor picks the plane: a copy of the positions this call reads
            at = step.reshape(1)  # type: ignore[union-attr]
            kb, vb = kb[:, :, :n].index_select(0, at)[0], vb[:, :, :n].index_select(0, at)[0]
        kb, vb = kb[:, :n], vb[:, :n]
        if call.rows is not None:
            kb, vb = kb.index_select(0, call.rows), vb.index_select(0, call.rows)
        return kb.transpose(1, 2), vb.transpose(1, 2)  # (B, H, S, D)

    def move(self, row: int, src: int, dst: int) -> None:
        """Every layer's K/V of physical index ``src`` of cache ``row`` to ``dst``, in every plane (a lane that
        leaves its branch's side place for its position)."""
        for buf in self.k + self.v:
            if buf.dim() == 5:
                buf[:, row, dst] = buf[:, row, src]
            else:
                buf[row, dst] = buf[row, src]
        if self.tokens is not None:
            self.tokens[row, dst] = self.tokens[row, src]

    def copy_forward(self, pos: Tensor, taken: Tensor, steps: int) -> None:
        """Per-step planes: each row's position ``pos`` ``(slots,)`` ran ``taken`` recurrences; its last one's K/V
        are copied into the planes up to ``steps`` it skipped, and the position counts as having run them."""
        rows = torch.arange(self.slots, device=pos.device)
        last = (taken - 1).clamp(min=0)
        skipped = torch.arange(steps, device=pos.device)[:, None] >= taken[None, :]   # (steps, slots)
        for i in range(self.n_prelude, self.n_prelude + self.n_core):
            for buf in (self.k[i], self.v[i]):
                src = buf[last, rows, pos]                                             # (slots, H, D)
                cur = buf[:steps, rows, pos]                                           # (steps, slots, H, D)
                buf[:steps, rows, pos] = torch.where(skipped[..., None, None], src[None], cur)
        if self.depth is not None:
            self.depth[rows, pos] = torch.maximum(self.depth[rows, pos], torch.full_like(taken, steps).int())

    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.k + self.v)

    def bytes_per_slot(self, length: int, max_steps: int) -> int:
        """K/V bytes of one slot holding ``length`` positions with ``max_steps`` planes per stacked core layer, in
        this cache's layout. Samplers report what their call asked for, not this cache's own size: a kept runner with
        more room than the call needs (``recdiff.engine.runner_cache``) would make the figure depend on what ran
        before."""
        total = 0
        for i, k in enumerate(self.k):
            planes = self.planes(i)
            n = 1 if planes is None else max_steps if self.n_prelude <= i < self.n_prelude + self.n_core else planes
            total += 2 * n * length * k.shape[-2] * k.shape[-1] * k.element_size()  # K and V
        return total


def make_call(freqs_cis: Tensor, pos: Tensor, length: int, rows: Tensor | None = None,
              write: Tensor | None = None, slot: Tensor | None = None, visible: Tensor | None = None) -> Call:
    """A call at absolute positions ``pos`` ``(B, T)``; keys are the ``length`` positions of each row, seen causally
    by position, or where ``visible`` ``(B, length)`` says (one-position rows: lanes, each on its own branch)."""
    B, T = pos.shape
    b_idx = (torch.arange(B, device=pos.device) if rows is None else rows)[:, None].expand(B, T)
    freqs = freqs_cis[0, pos.clamp(max=freqs_cis.shape[1] - 1)]  # (B, T, 1, D/2, 2); rows past the table are padding
    if visible is None:
        mask = (torch.arange(length, device=pos.device)[None, None, :] <= pos[:, :, None])[:, None]  # causal
    else:
        mask = visible[:, None, None, :length].expand(B, 1, T, length)
    return Call(rows=rows, b_idx=b_idx, pos=pos, freqs=freqs, mask=mask, write=write, slot=slot)
