"""The diffusion-forcing sampler (the paper's Algorithms 1 and 2).

Positions: the state at position p decodes the token of position p+1. The *wavefront* is the run of states
``start … start+W-1`` still being refined; tokens ``0 … n_frozen-1`` are final, and ``start == n_frozen - 1``
always (the last frozen token's state still predicts the first unfrozen one). One sampler step:

1. ``e = P(y[start : start+W])``, with momentum ``e ← η·e_prev + (1−η)·e`` where the position was embedded in the
   previous step (a position new to the wavefront has a zero momentum buffer, as in the authors' reference);
2. noise ``z ← (1−β_t)·z + β_t·InitState(α)`` with β_t from ``beta_schedule`` and the position's recurrence count;
3. ``r_inner`` recurrences ``z ← R(z, e)``, all wavefront positions in parallel, KV cache shared;
4. ``C(z)`` → proposals for positions ``start+1 … start+W``;
5. append ``headway`` new states (the first continues from the proposals; extra positions are filled with random
   ids from the model's vocabulary or ``pad_id``) unless the wavefront is full (a *standing wave*);
6. freeze: ``fixed`` — the state of a position that has had ``r_freeze`` (default r) sampler recurrences leaves
   the wavefront and the token it predicts is final: ⌈r/r'⌉ steps behind the front (Algorithm 1; with r' = r this
   is static AR at r). ``adaptive`` — with δ_p = ‖z_p − z_prev,p‖/‖z_p‖ over states refined in this and the
   previous step, states up to k* leave and their predictions freeze, where k* is the last position such that every
   compared state up to it has δ < ε (``freeze_rule="prefix"``, the paper's eq. (conv), default) or the last state
   with δ < ε (``freeze_rule="last"``, Algorithm 2's wording). ``r_freeze`` is then an optional recurrence budget
   after which a state freezes anyway (with wavefront 1, r' = 1, η = 0 and r_freeze = r this is adaptive-compute AR).

``adaptive_rule="reference"`` reproduces the authors' code bit for bit (the fixtures, published runs): there a
converged state at p freezes the token it *consumes* (p) and stays in the wavefront, and after a freeze δ compares
each state with the previous step's state of a position further right (their previous states are kept from the new
wavefront start but indexed from the old one). recdiff's default ``"paper"`` compares each position with itself and
freezes what a converged state predicts.

The prompt is prefilled at r recurrences in one parallel pass; the first new token comes from it. Frozen
positions leave the wavefront by moving a pointer (their K/V stay in the shared cache); the wavefront's own
entries are rewritten in place every recurrence.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from recdiff.errors import RecdiffError
from recdiff.model import relative_change
from recdiff.samplers.base import (
    Context,
    GenerationResult,
    boolean,
    half_open_unit,
    non_negative,
    non_negative_int,
    one_of,
    optional,
    positive,
    positive_int,
    unit_interval,
    validate,
)
from recdiff.trace import DiffusionTrace


SPEC = {
    "r": (32, positive_int),
    "r_inner": (4, positive_int),
    "freeze": ("adaptive", one_of("adaptive", "fixed")),
    "freeze_rule": ("prefix", one_of("prefix", "last")),
    "adaptive_rule": ("paper", one_of("paper", "reference")),
    "r_freeze": (None, optional(positive_int)),
    "epsilon": (0.03, positive),
    "wavefront": (128, positive_int),
    "headway": (1, positive_int),
    "pad_id": (None, optional(non_negative_int)),
    "beta": (0.0, unit_interval),
    "beta_schedule": ("linear", one_of("constant", "dampened", "linear", "sqrt")),
    "eta": (0.1, half_open_unit),
    "init_scale": (0.0, non_negative),
    "continuous_compute": (False, boolean),
    "max_steps": (None, optional(positive_int)),  # None: 4·max_new_tokens·⌈r/r'⌉, four times fixed mode's steps
    "kv_cache": ("shared", one_of("shared")),
}


def beta_per_position(beta: float, schedule: str, n: Tensor, r: int) -> Tensor:
    """β_t for each wavefront position given its recurrence count n (float tensor)."""
    if schedule == "constant":
        return torch.full_like(n, beta)
    if schedule == "dampened":  # the reference's dampened_state_mixer
        return beta / (1 + n)
    if schedule == "sqrt":
        return beta / torch.sqrt(1 + n)
    return beta * (1 - n / r).clamp(min=0)  # linear: reaches 0 once a position has had r recurrences


def generate(ctx: Context, params: dict) -> GenerationResult:
    p = validate("diffusion", params, SPEC)
    if p["pad_id"] is not None and p["pad_id"] >= ctx.model.config.vocab_size:
        raise RecdiffError(f"diffusion sampler: pad_id={p['pad_id']} is outside the vocabulary (size {ctx.model.config.vocab_size})")
    return _Diffusion(ctx, p).run()


class _Diffusion:
    def __init__(self, ctx: Context, p: dict) -> None:
        self.ctx, self.p = ctx, p
        self.m = ctx.model
        self.L = ctx.prompt.shape[1]
        self.r, self.r_inner, self.h = p["r"], p["r_inner"], p["headway"]
        # fixed: final after r recurrences unless told otherwise; adaptive: only a budget when one is given
        self.r_freeze = p["r_freeze"] or (self.r if p["freeze"] == "fixed" else None)
        # a configuration that never converges ends with a flag instead of running on
        self.max_steps = p["max_steps"] or 4 * ctx.max_new_tokens * -(-self.r // self.r_inner)
        block = self.m.config.block_size
        ctx.check_fits(self.L + ctx.max_new_tokens + 1)
        # the front may run up to `wavefront` positions ahead of the last frozen token
        self.max_len = min(block, self.L + ctx.max_new_tokens + p["wavefront"] + self.h + 1)
        self.dev = ctx.prompt.device

    def _extra_ids(self, n: int) -> Tensor:
        if self.p["pad_id"] is not None:
            return torch.full((n,), self.p["pad_id"], device=self.dev, dtype=torch.long)
        return torch.randint(0, self.m.config.vocab_size, (n,), device=self.dev, generator=self.ctx.generator)

    def run(self) -> GenerationResult:
        ctx, m, p, L = self.ctx, self.m, self.p, self.L
        eta, beta, alpha, eps = p["eta"], p["beta"], p["init_scale"], p["epsilon"]
        adaptive = p["freeze"] == "adaptive"
        reference_rule = p["adaptive_rule"] == "reference"
        cache = m.setup_cache(self.max_len, "shared")
        gen = ctx.generator

        seq = torch.zeros(self.max_len, dtype=torch.long, device=self.dev)  # frozen tokens + proposals
        seq[:L] = ctx.prompt[0]
        counter = np.zeros(self.max_len, dtype=np.int64)  # core recurrences per position
        age = np.zeros(self.max_len, dtype=np.int64)  # sampler recurrences of the state at each position
        stable = torch.zeros(self.max_len, dtype=torch.int32, device=self.dev)
        frozen_at = np.full(self.max_len, -1, dtype=np.int64)

        # prefill: the prompt at r recurrences in one parallel pass; its last logits give the first new token
        e = m.embed(ctx.prompt, 0)
        z = m.initial_state(e, alpha, gen)
        for k in range(self.r):
            z = m.core_step(z, e, 0, k)
        first = ctx.select(m.decode(z, 0)[0, -1:])
        seq[L] = first[0]
        counter[:L] = self.r
        core_passes, tokens_forward = self.r, self.r * L
        n_frozen, start = L + 1, L
        frozen_at[L] = 0
        z = m.initial_state(z[:, -1:], alpha, gen)  # the state for position L, which predicts token L+1
        prev_z, prev_start = z, start  # for δ: the states at the end of the previous step and where they start
        if eta > 0:  # momentum buffer, initialised with P of the sequence so far (no cache)
            prev_e, prev_e_start = m.embed(seq[None, : L + 1], 0, use_cache=False), 0

        stop_ids = torch.tensor(sorted(ctx.stop.ids), device=self.dev, dtype=torch.long) if ctx.stop.ids else None
        trace = _TraceRecorder(L) if ctx.trace else None
        steps = standing = 0
        seq_end = n_frozen
        stopped_by = "length"
        hit_cap = False
        while n_frozen - L < ctx.max_new_tokens:
            if steps >= self.max_steps:
                hit_cap, stopped_by = True, "max_steps"
                break
            W, frozen_before, step_start = z.shape[1], n_frozen, start
            e = m.embed(seq[None, start : start + W], start)
            if eta > 0:
                off = start - prev_e_start
                n_old = max(0, min(W, prev_e.shape[1] - off))
                e = e * (1 - eta)
                if n_old:
                    e[:, :n_old] += eta * prev_e[:, off : off + n_old]
                prev_e, prev_e_start = e, start
            if beta > 0:
                n = torch.from_numpy(counter[start : start + W]).to(self.dev, z.dtype)
                b = beta_per_position(beta, p["beta_schedule"], n, self.r)[None, :, None]
                z = (1 - b) * z + b * m.initial_state(z, alpha, gen)
            for _ in range(self.r_inner):
                z = m.core_step(z, e, start, 0)
            core_passes += self.r_inner
            tokens_forward += self.r_inner * W
            counter[start : start + W] += self.r_inner
            age[start : start + W] += self.r_inner
            new = ctx.select(m.decode(z, start)[0])  # (W,) proposals for positions start+1 … start+W

            # stability: frozen positions count as unchanged; proposals compared with the previous ones
            stable[:n_frozen] += 1
            stable[n_frozen : start + W] += (seq[n_frozen : start + W] == new[:-1]).int()
            seq[start + 1 : start + W + 1] = new

            # grow the front by `headway` positions, unless the wavefront (or the block) is full
            h = max(0, min(self.h, p["wavefront"] - W, self.max_len - (start + W)))
            if h < self.h:
                standing += 1
            if h:
                if h > 1:
                    seq[start + W + 1 : start + W + h] = self._extra_ids(h - 1)
                if p["continuous_compute"] and W >= h:
                    fresh = z[:, -h:].clone()
                else:
                    fresh = m.initial_state(z[:, :h], alpha, gen)
                z = torch.cat([z, fresh], dim=1)
            seq_end = start + W + h  # exclusive end of the current sequence

            # freeze: `shift` leading states leave the wavefront, each freezing the token it predicts
            delta, lo, shift = None, start, 0
            if adaptive:
                lo, hi = max(start, prev_start), min(start + z.shape[1], prev_start + prev_z.shape[1])
                if hi > lo:
                    delta = relative_change(z[0, lo - start : hi - start], prev_z[0, lo - prev_start : hi - prev_start])
                    below = (delta < eps).int()
                    if p["freeze_rule"] == "prefix":  # length of the leading run below ε, minus one
                        j = int(below.cumprod(0).sum()) - 1  # the one host sync per step
                    else:  # index of the last position below ε (-1: none)
                        j = int((below * torch.arange(1, below.numel() + 1, device=below.device)).max()) - 1
                    # paper: converged states lo … lo+j leave; reference: the state lo+j stays and only the token it
                    # consumes freezes
                    shift = lo + j + (0 if reference_rule else 1) - start if j >= 0 else 0
            if self.r_freeze is not None:  # recurrence budget: older states come first, so this is a prefix
                shift = max(shift, int((age[start : start + z.shape[1]] >= self.r_freeze).sum()))
            if shift > 0:
                frozen_at[n_frozen : start + shift + 1] = steps
                n_frozen, start = start + shift + 1, start + shift
                z = z[:, shift:]
                if z.shape[1] == 0:  # the whole wavefront froze (standing wave of one): continue after the new token
                    z = m.initial_state(prev_z[:, :1], alpha, gen)
            cache.length = start
            prev_z, prev_start = z, (step_start if reference_rule else start)

            if trace is not None:
                seq_end = max(seq_end, n_frozen)
                trace.record(seq[:seq_end], n_frozen, counter[:seq_end], stable[:seq_end], delta, lo if delta is not None else 0)
            steps += 1
            if n_frozen > frozen_before:
                if stop_ids is not None and bool(torch.isin(seq[frozen_before:n_frozen], stop_ids).any()):
                    stopped_by = "stop_token"
                    break
                if ctx.stop.strings and ctx.stop.first_stop(seq[L:n_frozen].tolist(), frozen_before - L):
                    stopped_by = "stop_string"
                    break

        # at the step cap, the unfrozen proposals are still the model's best guess: return them, flagged
        tokens = seq[L : (max(n_frozen, seq_end) if hit_cap else n_frozen)].tolist()
        if stopped_by in ("stop_token", "stop_string"):
            tokens = tokens[: ctx.stop.first_stop(tokens, 0)[0]]  # several tokens may freeze in the stopping step
        tokens = tokens[: ctx.max_new_tokens]
        n_out = L + len(tokens)
        stats = {
            "core_passes": core_passes,
            "tokens_forward": tokens_forward,
            "steps": steps,
            "standing_waves": standing,
            "new_tokens": len(tokens),
            "recurrences_per_position": counter[:n_out].tolist(),
            "stability_per_position": stable[:n_out].tolist(),
            "frozen_at_step": frozen_at[L:n_out].tolist(),  # step (0 = prefill) at which each new token froze
            "max_steps_reached": hit_cap,
            "unfrozen_tokens": max(0, L + len(tokens) - n_frozen),
            "kv_cache_bytes": cache.nbytes(),
            "ideal_speedup": (self.r + 1) / (self.r_inner + 1),
        }
        result_trace = trace.finish() if trace is not None else None
        return GenerationResult(tokens=tokens, stats=stats, trace=result_trace, stopped_by=stopped_by)


class _TraceRecorder:
    """Collects one row per step; only used with trace=True, so host copies here are fine."""

    def __init__(self, prompt_len: int) -> None:
        self.prompt_len = prompt_len
        self.rows: list[tuple[np.ndarray, int, np.ndarray, np.ndarray, np.ndarray]] = []

    def record(self, seq: Tensor, n_frozen: int, counter: np.ndarray, stable: Tensor, delta: Tensor | None, lo: int) -> None:
        d = np.full(len(counter), np.nan, dtype=np.float16)
        if delta is not None:
            d[lo : lo + delta.numel()] = delta.float().cpu().numpy()
        self.rows.append((seq.cpu().numpy().astype(np.int32), n_frozen, counter.astype(np.int32),
                          stable.cpu().numpy().astype(np.int32), d))

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


