"""What a machine allows, next to which ``python -m recdiff.bench`` reads each sampler's speed.

- The memory-bandwidth bound: the bytes a model call must read from device memory (:func:`read_bytes`,
  :func:`result_bytes`: the weights once per call, P and C once, R once per recurrence, the head's full matrix, plus
  the K/V of every attended position in every attention layer pass) over the copy bandwidth measured in the same run
  (:func:`copy_bandwidth`). A LoopSpec cycle is one call whose K recurrences each read R's weights once for all its
  lanes (:func:`weight_bytes`).
- The weight-product floor (:func:`product_floor`): one recurrence's weight products alone at the vendor GEMM's rate,
  by rows per call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from recdiff.model import RecurrentDepthModel
from recdiff.timing import Timer


# ---------------------------------------------------------------------------------------------- bandwidth bound
@dataclass(frozen=True)
class ReadBytes:
    """What one model call must read from device memory, in bytes: the weights of P (``prelude``), of one
    recurrence of R (``core``: the adapter and the core blocks) and of C (``coda``: the coda blocks, ``ln_f`` and the
    head's whole matrix, tied or not); ``kv``: the K and V of one position in one attention layer; ``layers``: the
    attention layers of P, R (per recurrence) and C. Embedding rows (one per position) are left out: < 1e-5 of it."""

    prelude: int
    core: int
    coda: int
    kv: int
    layers: tuple[int, int, int]
    kv_core: int | None = None  # a core of its own width (Parcae): its layers' K/V bytes per position (None: kv)

    def call(self, recurrences: int, keys: float = 0.0) -> float:
        """One model call (P, ``recurrences`` × R, C) whose attention reads ``keys`` positions per layer pass."""
        outer, core = self.layers[0] + self.layers[2], recurrences * self.layers[1]
        kv_core = self.kv if self.kv_core is None else self.kv_core
        return self.prelude + self.coda + recurrences * self.core + keys * (outer * self.kv + core * kv_core)


def read_bytes(model: RecurrentDepthModel) -> ReadBytes:
    """The model's :class:`ReadBytes`, from its parameters' sizes and dtype (a meta-device model works too)."""
    t, cfg = model.transformer, model.config
    item = next(model.parameters()).element_size()

    def size(*modules: torch.nn.Module) -> int:
        return sum(p.numel() for m in modules for p in m.parameters()) * item

    # a model without input injection (Ouro) has no adapter; its ln_f runs after every recurrence, read once per call;
    # Parcae's prelude norm and state projection C are read once per call too (a value-embedding table, as the token
    # embedding, only by the rows a call looks up: not counted)
    core = [t[k] for k in ("adapter", "core_block") if k in t]
    inner = cfg.core_config()
    return ReadBytes(prelude=size(*(t[k] for k in ("prelude", "ln_prelude") if k in t)), core=size(*core),
                     coda=size(*(t[k] for k in ("C", "coda", "ln_f") if k in t)) + model.lm_head.weight.numel() * item,
                     kv=2 * cfg.num_key_value_heads * cfg.head_dim * item,
                     layers=(cfg.n_layers_in_prelude, cfg.n_layers_in_recurrent_block, cfg.n_layers_in_coda),
                     kv_core=2 * inner.num_key_value_heads * inner.head_dim * item)


def model_calls(sampler: str, stats: dict, params: dict) -> int:
    """Model calls (P … C passes) of one sequence, prefill included, from its result's stats: static and adaptive
    AR one per token (the prefill gives the first), diffusion one per step after the prefill, speculative decoding
    ``lookahead`` drafts and one verification per round after the prefill, LoopSpec one per cycle after the
    prefill."""
    if sampler in ("diffusion", "loopspec"):
        return 1 + stats["steps"]
    if sampler == "speculative":
        return 1 + stats["rounds"] * (params.get("lookahead", 4) + 1)
    return stats["steps"]


def weight_bytes(rb: ReadBytes, sampler: str, stats: dict, params: dict) -> float:
    """The weights one sequence's model calls must read (batch 1): P and C once per call, R once per recurrence.
    LoopSpec's ``core_passes`` count every lane's recurrences, but a cycle's K core calls read R's weights once each
    for all lanes: its prefill reads R ``r`` times and each cycle K times; P for the cycles that start a lane (every
    one but the last r/K − 1, in which the last token's lanes only run on to r; none of those at an early stop; with a
    second readout, at least one per committed token), C for those that read one out (every one)."""
    calls = model_calls(sampler, stats, params)
    if sampler != "loopspec":
        return calls * (rb.prelude + rb.coda) + stats["core_passes"] * rb.core
    S, K, cycles = params.get("r", 32), params.get("r_draft", 4), stats["steps"]
    if params.get("r_draft2"):
        # with branches a cycle may start no lane on the committed chain; that chain's lanes start in cycles of their
        # own (each after its parent's first readout): the prefill's P and one per committed token after the first
        starts = max(stats["new_tokens"], 1)
    else:
        starts = 1 + max(cycles - (S // K - 1), 0)
    return starts * rb.prelude + calls * rb.coda + (S + cycles * K) * rb.core


def result_bytes(rb: ReadBytes, results: list[Any], prompt_lens: list[int], sampler: str, params: dict,
                 batch: int = 1) -> float:
    """Bytes the work of ``results`` must read, decoded ``batch`` at a time: the weights of each sequence's model
    calls (:func:`model_calls`) and recurrences (its ``core_passes``), shared by the ``batch`` sequences of a call
    (so at least 1/``batch`` of them per sequence), plus each sequence's own K/V, counted at the mean positions a
    call attends to (the prompt and half the new tokens: the wavefront ahead of them is left out). A lower bound of
    what is read, so the bound it gives is never flattering."""
    weights = kv = 0.0
    for res, n_prompt in zip(results, prompt_lens):
        s, calls = res.stats, model_calls(sampler, res.stats, params)
        weights += weight_bytes(rb, sampler, s, params)
        keys = n_prompt + len(res.tokens) / 2
        kv += (calls * (rb.layers[0] + rb.layers[2]) + s["core_passes"] * rb.layers[1]) * keys * rb.kv
    return weights / batch + kv


def copy_bandwidth(device: torch.device, nbytes: int = 2 << 30, repeats: int = 10) -> float:
    """Bytes per second of a device-to-device copy of ``nbytes``, counting the bytes read and the bytes written
    (2·``nbytes`` per copy, as STREAM's copy does): the best of ``repeats`` after one untimed copy."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(repeats):
        with Timer(device) as t:
            dst.copy_(src)
        best = min(best, t.seconds)
    del src, dst
    return 2 * nbytes / best


# ---------------------------------------------------------------------------------------------- product floor
FLOOR_ROWS = (1, 8, 32, 256)


def recurrence_matrices(model: RecurrentDepthModel) -> list[torch.Tensor]:
    """One recurrence's weight matrices (the adapter's and the core blocks'), those of one input width stacked."""
    t = model.transformer
    by_width: dict[int, list[torch.Tensor]] = {}
    # the adapter's matrices (none without input injection, Ouro; Parcae's diagonal injection: B)
    adapter = [p for p in t.adapter.parameters() if p.dim() == 2] if "adapter" in t else []
    for w in adapter + [p for p in t.core_block.parameters() if p.dim() == 2]:
        by_width.setdefault(w.shape[1], []).append(w.detach())
    return [torch.cat(ws) for ws in by_width.values()]


@torch.inference_mode()
def product_floor(model: RecurrentDepthModel, rows: int, repeats: int = 50) -> float:
    """Seconds per row of one recurrence's weight products alone: the adapter and every core block's matrices on
    ``rows`` rows, eagerly (the vendor's GEMM), in the model's dtype and device; no norms, attention or RoPE. The
    matrices that read the same input width are stacked into one, so a recurrence is three products whatever its
    depth: the same bytes and multiplications with few calls. What a core row·recurrence costs at the vendor GEMM's
    rate, a reference point rather than a strict bound (inductor's GEMM template beats it on few rows of a small
    model; on the tiny fixture a call's own few µs weigh in): at one row it is how fast the weights stream from
    memory, at many rows how fast the device multiplies."""
    weights = recurrence_matrices(model)
    xs = [torch.randn(rows, w.shape[1], device=w.device, dtype=w.dtype) for w in weights]

    def once() -> None:
        for x, w in zip(xs, weights):
            torch.nn.functional.linear(x, w)

    once()
    best = float("inf")
    for _ in range(repeats):
        with Timer(model.device) as timer:
            once()
        best = min(best, timer.seconds)
    return best / rows
