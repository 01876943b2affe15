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

Batched (:class:`DiffusionBatch`): every occupied slot takes one sampler step at once. Each slot's wavefront lives
in a fixed buffer of ``wavefront + headway`` rows (valid rows first, the rest padding); the model runs on the
rows up to the widest live wavefront (on CUDA graphs: rounded up to a power of two). Every per-sequence decision —
momentum, noise, stability, growth, the freeze point, stops — is a tensor operation over all slots, and a step
reads back once (the slots' pointers and flags). Tokens, positions and counters are kept per absolute position.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from recdiff.errors import RecdiffError
from recdiff.model import relative_change
from recdiff.engine.runner import Runner, cache_length
from recdiff.engine.scheduler import Request
from recdiff.samplers.base import (
    at_most,
    recurrence,
    GenerationResult,
    Options,
    check_fits,
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
    "r": (32, recurrence),
    "r_inner": (4, recurrence),
    "freeze": ("adaptive", one_of("adaptive", "fixed")),
    "freeze_rule": ("prefix", one_of("prefix", "last")),
    "adaptive_rule": ("paper", one_of("paper", "reference")),
    "r_freeze": (None, optional(recurrence)),
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

RULES = [at_most("r_inner", "r"), at_most("headway", "wavefront")]


def beta_per_position(beta: float, schedule: str, n: Tensor, r: int) -> Tensor:
    """β_t for each wavefront position given its recurrence count n (float tensor)."""
    if schedule == "constant":
        return torch.full_like(n, beta)
    if schedule == "dampened":  # the reference's dampened_state_mixer
        return beta / (1 + n)
    if schedule == "sqrt":
        return beta / torch.sqrt(1 + n)
    return beta * (1 - n / r).clamp(min=0)  # linear: reaches 0 once a position has had r recurrences


def make_batch(opts: Options, params: dict) -> "DiffusionBatch":
    p = validate("diffusion", params, SPEC, RULES)
    if p["pad_id"] is not None and p["pad_id"] >= opts.model.config.vocab_size:
        raise RecdiffError(f"diffusion sampler: pad_id={p['pad_id']} is outside the vocabulary (size {opts.model.config.vocab_size})")
    return DiffusionBatch(opts, p)


class DiffusionBatch:
    def __init__(self, opts: Options, p: dict) -> None:
        m = opts.model
        self.opts, self.p, self.m, self.slots = opts, p, m, opts.slots
        self.r, self.r_inner, self.h, self.cap = p["r"], p["r_inner"], p["headway"], p["wavefront"]
        # fixed: final after r recurrences unless told otherwise; adaptive: only a budget when one is given
        self.r_freeze = p["r_freeze"] or (self.r if p["freeze"] == "fixed" else None)
        self.adaptive, self.reference = p["freeze"] == "adaptive", p["adaptive_rule"] == "reference"
        self.Tw = self.cap + self.h  # window rows: the widest wavefront plus one step's growth
        # padded wavefront rows reach up to Tw positions past the furthest front
        length = cache_length(m, opts.longest + self.cap + self.h + 1) + self.Tw + 1
        self.runner = run = Runner.get(m, opts.slots, length, "shared")
        B, S, E, dev = self.slots, run.length, m.config.n_embd, run.device
        self.S, self.E, self.dev = S, E, dev
        i64 = dict(dtype=torch.long, device=dev)
        # per absolute position
        self.seq = torch.zeros((B, S), **i64)  # frozen tokens + proposals
        self.counter = torch.zeros((B, S), **i64)  # core recurrences per position
        self.age = torch.zeros((B, S), **i64)  # sampler recurrences of the state at each position
        self.stable = torch.zeros((B, S), **i64)
        self.frozen_at = torch.full((B, S), -1, **i64)
        # per slot
        z = lambda: torch.zeros(B, **i64)  # noqa: E731
        self.start, self.W, self.n_frozen, self.steps, self.standing = z(), z(), z(), z(), z()
        self.core_passes, self.tokens_forward, self.seq_end, self.L = z(), z(), z(), z()
        self.max_new, self.max_len, self.max_steps = z(), z(), z()
        self.prev_start, self.prev_len, self.prev_e_start, self.prev_e_len = z(), z(), z(), z()
        self.hit_cap = torch.zeros(B, dtype=torch.bool, device=dev)
        # the wavefront's states (valid rows first), the previous step's states (for δ) and embeddings (momentum)
        self.z = torch.zeros((B, self.Tw, E), device=dev, dtype=run.dtype)
        self.prev_z, self.prev_e = torch.zeros_like(self.z), torch.zeros_like(self.z)
        self.req: list[Request | None] = [None] * B
        self.host: list[dict | None] = [None] * B  # per slot: pointers read back once per step
        self.stop_ids = (torch.tensor(sorted(opts.stop.ids), **i64) if opts.stop.ids else None)
        self.rows = torch.arange(self.Tw, device=dev)
        self.positions = torch.arange(S, device=dev)

    def check(self, index: int | None, prompt_len: int, max_new_tokens: int) -> None:
        check_fits(self.m, prompt_len, prompt_len + max_new_tokens + 1, index)

    # ------------------------------------------------------------------------------------------ prefill
    def admit(self, slot: int, req: Request) -> None:
        m, run, p, L, gen = self.m, self.runner, self.p, len(req.prompt), req.generator
        alpha, b = p["init_scale"], slot
        ids = torch.tensor([req.prompt], device=self.dev)
        # the prompt at r recurrences in one parallel pass; its last logits give the first new token
        call = run.call(torch.arange(L, device=self.dev)[None], rows=run.rows_all[b : b + 1], keys=L)
        e = run.embed(ids, call)
        zp = m.initial_state(e, alpha, gen)
        for k in range(self.r):
            zp = run.core(zp, e, call, k)
        first = int(self.opts.select(run.decode(zp, call)[0, -1:], gen)[0])
        for t in (self.counter, self.age, self.stable):
            t[b] = 0
        self.frozen_at[b] = -1
        self.seq[b, :L], self.seq[b, L] = ids[0], first
        self.counter[b, :L] = self.r
        self.frozen_at[b, L] = 0
        z0 = m.initial_state(zp[:, -1:], alpha, gen)  # the state for position L, which predicts token L+1
        self.z[b, 0], self.prev_z[b, 0] = z0[0, 0], z0[0, 0]
        if p["eta"] > 0:  # momentum buffer: P of the sequence so far (no cache); only its last row is ever used
            self.prev_e[b, 0] = m.embed(self.seq[b : b + 1, : L + 1])[0, L]
        max_steps = p["max_steps"] or 4 * req.max_new_tokens * -(-self.r // self.r_inner)
        block = m.config.block_size
        for t, v in ((self.start, L), (self.W, 1), (self.n_frozen, L + 1), (self.steps, 0), (self.standing, 0),
                     (self.core_passes, self.r), (self.tokens_forward, self.r * L), (self.seq_end, L + 1),
                     (self.L, L), (self.max_new, req.max_new_tokens), (self.max_steps, max_steps),
                     # the front may run up to `wavefront` positions ahead of the last frozen token
                     (self.max_len, min(block, L + req.max_new_tokens + self.cap + self.h + 1)),
                     (self.prev_start, L), (self.prev_len, 1), (self.prev_e_start, L), (self.prev_e_len, 1)):
            t[b] = v
        self.hit_cap[b] = False
        req.data = {**req.data, "stopped_by": "length", "done": False}
        if req.data.get("trace"):
            req.data["recorder"] = _TraceRecorder(L)
        self.req[b] = req
        self.host[b] = {"W": 1, "n_frozen": L + 1}
        if req.max_new_tokens <= 1:  # the prefill's token is all that was asked for
            req.data["done"] = True

    # ------------------------------------------------------------------------------------------ one step
    def step(self) -> list[int]:
        live = [b for b, q in enumerate(self.req) if q is not None and not q.data["done"]]
        if live:
            self._step(live)
        return [b for b, q in enumerate(self.req) if q is not None and q.data["done"]]

    def _noise(self, shape_rows: list[int], live: list[int]) -> Tensor:
        """Initial states for ``shape_rows[b]`` rows of each live slot, from its own stream (zeros at α = 0)."""
        out = torch.zeros((self.slots, max(shape_rows + [1]), self.E), device=self.dev, dtype=self.z.dtype)
        if self.p["init_scale"] > 0:
            for b in live:
                n = shape_rows[b]
                if n:
                    out[b, :n] = self.m.initial_state(out[b : b + 1, :n], self.p["init_scale"], self.req[b].generator)[0]
        return out

    def _step(self, live: list[int]) -> None:
        p, run = self.p, self.runner
        eta, beta, eps, ri = p["eta"], p["beta"], p["epsilon"], self.r_inner
        dev, E = self.dev, self.E
        on = torch.zeros(self.slots, dtype=torch.bool, device=dev)
        on[live] = True
        Wh = [self.host[b]["W"] if b in live else 0 for b in range(self.slots)]
        T = run.width(max(Wh), self.Tw)  # a few static shapes when compiled
        start, W = torch.where(on, self.start, 0), torch.where(on, self.W, 0)
        t = self.rows[:T]
        pos = start[:, None] + t  # (B, T)
        valid = t[None] < W[:, None]
        ids = self.seq.gather(1, pos)
        step_start = start.clone()

        # 1. momentum: positions embedded in the previous step mix in η of their previous embedding
        e_mix = torch.zeros((self.slots, T, E), device=dev, dtype=self.z.dtype)
        if eta > 0:
            src = t[None] + (start - self.prev_e_start)[:, None]
            ok = valid & (src < self.prev_e_len[:, None])
            e_mix = torch.where(ok[..., None], self.prev_e.gather(1, src.clamp(0, self.Tw - 1)[..., None].expand(-1, -1, E)), e_mix)
        # 2. noise, with β_t from the schedule and each position's recurrence count
        z = self.z[:, :T]
        if beta > 0:
            n = self.counter.gather(1, pos).to(z.dtype)
            b_t = beta_per_position(beta, p["beta_schedule"], n, self.r)[..., None]
            z = (1 - b_t) * z + b_t * self._noise(Wh, live)[:, :T]

        # 3.-4. P, r' recurrences, C over the padded wavefront
        # the furthest query: the last padded row of the slot whose wavefront starts furthest (start = n_frozen - 1)
        keys = run.keys(max(self.host[b]["n_frozen"] - 1 for b in live) + T)

        def model_step(ids: Tensor, pos: Tensor, z: Tensor, e_mix: Tensor) -> tuple[Tensor, Tensor, Tensor]:
            call = run.call(pos, keys=keys)
            e = run.embed(ids, call)
            if eta > 0:
                e = e * (1 - eta) + eta * e_mix
            for _ in range(ri):
                z = run.core(z, e, call)
            return z, e, run.decode(z, call)

        z, e, logits = run.graphed(f"diffusion-r{ri}-eta{eta}-k{keys}", model_step, ids, pos, z, e_mix)
        if eta > 0:
            self.prev_e[:, :T] = e
            self.prev_e_start, self.prev_e_len = start.clone(), W.clone()
        gens = [q.generator if q is not None and b in live else None for b, q in enumerate(self.req)]
        if self.opts.select.greedy:
            new = logits.argmax(-1)  # (B, T) proposals for positions start+1 … start+T
        else:
            new = torch.zeros((self.slots, T), dtype=torch.long, device=dev)
            for b in live:
                new[b, : Wh[b]] = self.opts.select(logits[b, : Wh[b]], gens[b])
        self.core_passes += ri * on
        self.tokens_forward += ri * W
        self.counter.scatter_add_(1, pos, ri * valid.long())
        self.age.scatter_add_(1, pos, ri * valid.long())

        # stability: frozen positions count as unchanged; proposals compared with the previous ones
        self.stable += (self.positions[None] < self.n_frozen[:, None]) & on[:, None]
        same = (self.seq.gather(1, pos + 1) == new) & (t[None] < (W - 1)[:, None])
        self.stable.scatter_add_(1, pos + 1, same.long())
        self.seq.scatter_(1, pos + 1, torch.where(valid, new, self.seq.gather(1, pos + 1)))

        # 5. grow the front by `headway` positions, unless the wavefront (or the block) is full
        h = torch.minimum(torch.clamp(self.cap - W, max=self.h), self.max_len - (start + W)).clamp(min=0) * on
        self.standing += (h < self.h) & on
        Tg = min(self.Tw, T + self.h)
        tg = self.rows[:Tg]
        zb = torch.zeros((self.slots, Tg, E), device=dev, dtype=z.dtype)
        zb[:, :T] = z
        grow = (tg[None] >= W[:, None]) & (tg[None] < (W + h)[:, None])
        if self.h > 1:  # extra positions get random ids from the vocabulary (or pad_id)
            hh = h.tolist()
            for b in live:
                if hh[b] > 1:
                    self.seq[b, int(self.start[b]) + Wh[b] + 1 : int(self.start[b]) + Wh[b] + hh[b]] = self._extra_ids(hh[b] - 1, gens[b])
        if p["continuous_compute"]:  # the new state continues from the last one(s), where there are enough
            cont = (W >= h)[:, None] & grow
            src = (tg[None] - h[:, None]).clamp(min=0)
            fresh = torch.where(cont[..., None], zb.gather(1, src[..., None].expand(-1, -1, E)), 0.0)
            need = ((W < h) & (h > 0)).tolist()
            rnd = self._noise([int(h[b]) if need[b] else 0 for b in range(self.slots)], live)
            fresh = torch.where((grow & ~cont)[..., None], _rows_at(rnd, tg, W), fresh)
        else:
            hl = h.tolist()
            fresh = _rows_at(self._noise([hl[b] for b in range(self.slots)], live), tg, W)
        zb = torch.where(grow[..., None], fresh.to(zb.dtype), zb)
        Wp = W + h
        seq_end = start + Wp  # exclusive end of the current sequence

        # 6. freeze: `shift` leading states leave the wavefront, each freezing the token it predicts
        shift = torch.zeros_like(start)
        delta, lo, a, c = None, start, start, start
        if self.adaptive:
            lo = torch.maximum(start, self.prev_start)
            hi = torch.minimum(start + Wp, self.prev_start + self.prev_len)
            a, c = lo - start, hi - start  # compared window rows a … c-1
            src = (tg[None] + (start - self.prev_start)[:, None]).clamp(0, self.Tw - 1)
            delta = relative_change(zb, self.prev_z.gather(1, src[..., None].expand(-1, -1, E)))  # (B, Tg)
            cmp = (tg[None] >= a[:, None]) & (tg[None] < c[:, None])
            below = (delta < eps) & cmp
            if p["freeze_rule"] == "prefix":  # length of the leading run below ε, minus one
                lead = torch.where(tg[None] < a[:, None], True, below).long().cumprod(1).sum(1) - a
                j = lead - 1
            else:  # index of the last position below ε (-1: none)
                j = ((tg[None] - a[:, None] + 1) * below).max(1).values - 1
            # paper: converged states lo … lo+j leave; reference: the state lo+j stays and only the token it consumes
            # freezes
            shift = torch.where((c > a) & (j >= 0), lo + j + (0 if self.reference else 1) - start, 0)
        if self.r_freeze is not None:  # recurrence budget: older states come first, so this is a prefix
            aged = (self.age.gather(1, start[:, None] + tg[None]) >= self.r_freeze) & (tg[None] < Wp[:, None])
            shift = torch.maximum(shift, aged.sum(1))
        shift = shift * on
        frozen_before = self.n_frozen.clone()
        froze = shift > 0
        newly = (self.positions[None] >= self.n_frozen[:, None]) & (self.positions[None] < (start + shift + 1)[:, None])
        self.frozen_at = torch.where(newly & froze[:, None], self.steps[:, None], self.frozen_at)
        self.n_frozen = torch.where(froze, start + shift + 1, self.n_frozen)
        new_start = start + shift
        keep = (tg[None] + shift[:, None]).clamp(max=Tg - 1)
        zb = zb.gather(1, keep[..., None].expand(-1, -1, E))
        W_new = Wp - shift
        empty = (W_new == 0) & on  # the whole wavefront froze (standing wave of one): continue after the new token
        if bool(empty.any()):
            el = empty.tolist()
            zb[:, 0] = torch.where(empty[:, None], self._noise([1 if el[b] else 0 for b in range(self.slots)], live)[:, 0], zb[:, 0])
        W_new = torch.where(empty, 1, W_new)
        self.z[:, :Tg] = zb
        self.prev_z[:, :Tg] = zb
        self.prev_start = torch.where(on, step_start if self.reference else new_start, self.prev_start)
        self.prev_len = torch.where(on, W_new, self.prev_len)
        self.start = torch.where(on, new_start, self.start)
        self.W = torch.where(on, W_new, self.W)
        self.seq_end = torch.where(on, torch.maximum(seq_end, self.n_frozen), self.seq_end)
        self.steps += on

        # stops among the newly frozen tokens; the length limit; the step cap
        grew = self.n_frozen > frozen_before
        stop_tok = torch.zeros_like(on)
        if self.stop_ids is not None:
            span = (self.positions[None] >= frozen_before[:, None]) & (self.positions[None] < self.n_frozen[:, None])
            stop_tok = (torch.isin(self.seq, self.stop_ids) & span).any(1) & grew
        long_enough = self.n_frozen - self.L >= self.max_new
        capped = ~long_enough & ~stop_tok & (self.steps >= self.max_steps)
        flags = torch.stack([self.W, self.n_frozen, grew.long(), stop_tok.long(), long_enough.long(), capped.long()], 1)
        flags = flags.tolist()  # the step's one read-back
        traced = [b for b in live if self.req[b].data.get("trace")]
        for b in traced:
            self._record(b, delta, lo, a, c)
        for b in live:
            Wb, nf, g, st, full, cap = flags[b]
            d = self.req[b].data
            before = self.host[b]["n_frozen"]
            self.host[b] = {"W": Wb, "n_frozen": nf}
            if st:
                d["stopped_by"], d["done"] = "stop_token", True
            elif g and self.opts.stop.strings:
                L = len(self.req[b].prompt)
                if self.opts.stop.first_stop(self.seq[b, L:nf].tolist(), before - L):
                    d["stopped_by"], d["done"] = "stop_string", True
            if not d["done"] and (full or cap):
                d["done"] = True
                if cap:
                    d["stopped_by"] = "max_steps"
                    self.hit_cap[b] = True

    def _extra_ids(self, n: int, gen: torch.Generator) -> Tensor:
        if self.p["pad_id"] is not None:
            return torch.full((n,), self.p["pad_id"], device=self.dev, dtype=torch.long)
        return torch.randint(0, self.m.config.vocab_size, (n,), device=self.dev, generator=gen)

    def _record(self, b: int, delta: Tensor | None, lo: Tensor, a: Tensor, c: Tensor) -> None:
        """One trace row of slot ``b`` (only for sequences asked to be traced: host copies are fine here)."""
        end = int(self.seq_end[b])
        d, lo_b = None, 0
        if delta is not None and int(c[b]) > int(a[b]):
            d, lo_b = delta[b, int(a[b]) : int(c[b])], int(lo[b])
        self.req[b].data["recorder"].record(self.seq[b, :end], int(self.n_frozen[b]), self.counter[b, :end].cpu().numpy(),
                                            self.stable[b, :end], d, lo_b)

    # ------------------------------------------------------------------------------------------ result
    def finish(self, slot: int) -> GenerationResult:
        req, self.req[slot] = self.req[slot], None
        b, d, L = slot, req.data, len(req.prompt)
        n_frozen, hit_cap = int(self.n_frozen[b]), bool(self.hit_cap[b])
        end = max(n_frozen, int(self.seq_end[b])) if hit_cap else n_frozen
        # at the step cap, the unfrozen proposals are still the model's best guess: return them, flagged
        tokens = self.seq[b, L:end].tolist()
        if d["stopped_by"] in ("stop_token", "stop_string"):
            tokens = tokens[: self.opts.stop.first_stop(tokens, 0)[0]]  # several tokens may freeze in the stopping step
        tokens = tokens[: req.max_new_tokens]
        n_out = L + len(tokens)
        stats = {
            "core_passes": int(self.core_passes[b]),
            "tokens_forward": int(self.tokens_forward[b]),
            "steps": int(self.steps[b]),
            "standing_waves": int(self.standing[b]),
            "new_tokens": len(tokens),
            "recurrences_per_position": self.counter[b, :n_out].tolist(),
            "stability_per_position": self.stable[b, :n_out].tolist(),
            "frozen_at_step": self.frozen_at[b, L:n_out].tolist(),  # step (0 = prefill) at which each new token froze
            "max_steps_reached": hit_cap,
            "unfrozen_tokens": max(0, L + len(tokens) - n_frozen),
            "kv_cache_bytes": self.runner.cache.bytes_per_slot(),
            "ideal_speedup": (self.r + 1) / (self.r_inner + 1),
        }
        rec = d.get("recorder")
        return GenerationResult(tokens=tokens, stats=stats, trace=rec.finish() if rec else None,
                                stopped_by=d["stopped_by"])


def _rows_at(src: Tensor, rows: Tensor, first: Tensor) -> Tensor:
    """``out[b, t] = src[b, t - first[b]]`` for the window rows ``rows`` (rows before ``first`` get row 0)."""
    idx = (rows[None] - first[:, None]).clamp(0, src.shape[1] - 1)
    return src.gather(1, idx[..., None].expand(-1, -1, src.shape[-1]))


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


