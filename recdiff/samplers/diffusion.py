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

The prompt is prefilled at r recurrences in one parallel pass (prompts admitted together share it); the first new
token comes from it. Frozen positions leave the wavefront by moving a pointer (their K/V stay in the shared cache);
the wavefront's own entries are rewritten in place every recurrence.

Batched (:class:`DiffusionBatch`): every occupied slot takes one sampler step at once. Each slot's wavefront lives
in a fixed buffer of ``wavefront + headway`` rows (valid rows first, the rest padding); the model runs on the rows
up to the widest live wavefront (under CUDA graphs: rounded up to a power of two). Every per-sequence decision —
momentum, noise, stability, growth, the freeze point, stops — is a tensor operation over all slots
(:func:`gather_inputs` and :func:`advance`, pure functions of the batch state), and a step reads back once (the
slots' pointers and flags). Random draws (α > 0) are made on the host beforehand, from each sequence's own stream.
Tokens, positions and counters are kept per absolute position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from torch import Tensor

from recdiff.errors import RecdiffError
from recdiff.model import relative_change
from recdiff.engine.runner import Runner, cache_length
from recdiff.engine.scheduler import Request
from recdiff.checks import validate
from recdiff.params import DiffusionParams
from recdiff.samplers.base import GenerationResult, Options, check_fits
from recdiff.trace import DiffusionTrace


SPEC = DiffusionParams.spec()   # the parameters are declared in recdiff/params.py
RULES = DiffusionParams.rules


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


# ---------------------------------------------------------------------------------------------- one step, as tensors
# A sampler step is two pure functions of the batch's device state around the model call (P, r' recurrences, C):
# ``gather_inputs`` (the wavefront's ids, positions, noised states and momentum embeddings) and ``advance``
# (proposals, counters, growth, the freeze point, stops). Both run eagerly, as compiled programs
# (recdiff/engine/program.py), or inside a CUDA graph; every random draw happens on the host beforehand, from each
# sequence's own stream, in the algorithm's order, and arrives as a tensor.

# the device state ``advance`` reads and returns, per absolute position (B, S) and per slot (B,)
STATE = ("seq", "counter", "age", "stable", "frozen_at", "start", "W", "n_frozen", "steps", "standing", "core_passes",
         "tokens_forward", "seq_end", "prev_start", "prev_len", "L", "max_new", "max_steps")
CHANGED = STATE[:-3]  # what a step changes (the prompt length and the limits stay)


@dataclass(frozen=True)
class StepRule:
    """Every constant of a step's tensor functions (part of a compiled program's name)."""

    r: int
    r_inner: int
    headway: int
    eta: float
    beta: float
    beta_schedule: str
    noise: bool  # α > 0: new and noised states are random (drawn on the host); else zeros
    continuous: bool
    adaptive: bool
    reference: bool
    prefix: bool
    epsilon: float
    r_freeze: int | None
    greedy: bool
    stops: bool  # stop token ids given


def _with(fn: Callable[[StepRule, tuple[Tensor, ...]], tuple[Tensor, ...]], rule: StepRule) -> Callable[..., Any]:
    """``fn`` as an engine piece (``piece(model, runner, args)``) for this rule."""

    def piece(model: Any, run: Any, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        return fn(rule, args)

    return piece


def gather_inputs(rule: StepRule, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """The wavefront's inputs to the model: ids ``(B, T)``, positions, states (noised by β_t) and, with momentum,
    each position's previous embedding (zero where it was not embedded in the previous step)."""
    seq, start, W, z, counter, prev_e, prev_e_start, prev_e_len, on, t, *noise = args
    T, E = t.shape[0], z.shape[-1]
    start, W = torch.where(on, start, 0), torch.where(on, W, 0)
    pos = start[:, None] + t  # (B, T)
    valid = t[None] < W[:, None]
    ids = seq.gather(1, pos)
    e_mix = torch.zeros((z.shape[0], T, E), device=z.device, dtype=z.dtype)
    if rule.eta > 0:  # positions embedded in the previous step mix in η of their previous embedding
        src = t[None] + (start - prev_e_start)[:, None]
        ok = valid & (src < prev_e_len[:, None])
        prev = prev_e.gather(1, src.clamp(0, prev_e.shape[1] - 1)[..., None].expand(-1, -1, E))
        e_mix = torch.where(ok[..., None], prev, e_mix)
    z = z[:, :T]
    if rule.beta > 0:  # noise, with β_t from the schedule and each position's recurrence count
        n = counter.gather(1, pos).to(z.dtype)
        b_t = beta_per_position(rule.beta, rule.beta_schedule, n, rule.r)[..., None]
        z = (1 - b_t) * z + b_t * (noise[0] if rule.noise else torch.zeros_like(z))
    return ids, pos, z, e_mix


def advance(rule: StepRule, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """Steps 4-6 of the sampler after the model call, for every slot at once: proposals, counters and stability,
    growth by the headway, the freeze point, stops. Returns the changed state (in :data:`CHANGED` order), the
    wavefront states ``(B, Tg, E)`` to keep (as ``z`` and as the next step's ``prev_z``), the momentum window, the
    flags the host reads back, and (adaptive freezing) δ with its compared window for traces. Every returned tensor
    is new (a compiled program's outputs must be its graph's)."""
    n_state = len(STATE)
    s = dict(zip(STATE, args[:n_state]))
    prev_z, on, h, z, logits, t, tg, *rest = args[n_state:]
    new = logits.argmax(-1) if rule.greedy else rest.pop(0)  # (B, T) proposals for positions start+1 … start+T
    stop_ids = rest.pop(0) if rule.stops else None
    grow_noise = rest.pop(0) if rule.noise else None
    B, T, Tg, E = z.shape[0], t.shape[0], tg.shape[0], z.shape[-1]
    ri = rule.r_inner
    positions = torch.arange(s["seq"].shape[1], device=z.device)
    start, W = torch.where(on, s["start"], 0), torch.where(on, s["W"], 0)
    step_start = start
    pos = start[:, None] + t
    valid = t[None] < W[:, None]
    seq = s["seq"]
    out = {k: s[k] for k in STATE}
    out["core_passes"] = s["core_passes"] + ri * on
    out["tokens_forward"] = s["tokens_forward"] + ri * W
    out["counter"] = s["counter"].scatter_add(1, pos, ri * valid.long())
    out["age"] = s["age"].scatter_add(1, pos, ri * valid.long())

    # stability: frozen positions count as unchanged; proposals compared with the previous ones
    stable = s["stable"] + ((positions[None] < s["n_frozen"][:, None]) & on[:, None])
    same = (seq.gather(1, pos + 1) == new) & (t[None] < (W - 1)[:, None])
    out["stable"] = stable.scatter_add(1, pos + 1, same.long())
    seq = seq.scatter(1, pos + 1, torch.where(valid, new, seq.gather(1, pos + 1)))
    out["seq"] = seq

    # 5. grow the front by `h` positions (the host computed h: the headway unless the wavefront or block is full)
    out["standing"] = s["standing"] + ((h < rule.headway) & on)
    zb = torch.cat([z, z.new_zeros((B, Tg - T, E))], 1)  # the states, padded to the grown width
    grow = (tg[None] >= W[:, None]) & (tg[None] < (W + h)[:, None])
    rnd = _rows_at(grow_noise, tg, W) if rule.noise else torch.zeros_like(zb)
    if rule.continuous:  # the new state continues from the last one(s), where there are enough
        cont = (W >= h)[:, None] & grow
        src = (tg[None] - h[:, None]).clamp(min=0)
        fresh = torch.where(cont[..., None], zb.gather(1, src[..., None].expand(-1, -1, E)), 0.0)
        fresh = torch.where((grow & ~cont)[..., None], rnd, fresh)
    else:
        fresh = rnd
    zb = torch.where(grow[..., None], fresh.to(zb.dtype), zb)
    Wp = W + h
    seq_end = start + Wp  # exclusive end of the current sequence

    # 6. freeze: `shift` leading states leave the wavefront, each freezing the token it predicts
    shift = torch.zeros_like(start)
    if rule.adaptive:
        lo = torch.maximum(start, s["prev_start"])
        hi = torch.minimum(start + Wp, s["prev_start"] + s["prev_len"])
        a, c = lo - start, hi - start  # compared window rows a … c-1
        src = (tg[None] + (start - s["prev_start"])[:, None]).clamp(0, prev_z.shape[1] - 1)
        delta = relative_change(zb, prev_z.gather(1, src[..., None].expand(-1, -1, E)))  # (B, Tg)
        cmp = (tg[None] >= a[:, None]) & (tg[None] < c[:, None])
        below = (delta < rule.epsilon) & cmp
        if rule.prefix:  # length of the leading run below ε, minus one
            lead = torch.where(tg[None] < a[:, None], True, below).long().cumprod(1).sum(1) - a
            j = lead - 1
        else:  # index of the last position below ε (-1: none)
            j = ((tg[None] - a[:, None] + 1) * below).max(1).values - 1
        # paper: converged states lo … lo+j leave; reference: the state lo+j stays and only the token it consumes
        # freezes
        shift = torch.where((c > a) & (j >= 0), lo + j + (0 if rule.reference else 1) - start, 0)
    if rule.r_freeze is not None:  # recurrence budget: older states come first, so this is a prefix
        aged = (out["age"].gather(1, start[:, None] + tg[None]) >= rule.r_freeze) & (tg[None] < Wp[:, None])
        shift = torch.maximum(shift, aged.sum(1))
    shift = shift * on
    frozen_before = s["n_frozen"]
    froze = shift > 0
    newly = (positions[None] >= frozen_before[:, None]) & (positions[None] < (start + shift + 1)[:, None])
    out["frozen_at"] = torch.where(newly & froze[:, None], s["steps"][:, None], s["frozen_at"])
    n_frozen = torch.where(froze, start + shift + 1, frozen_before)
    out["n_frozen"] = n_frozen
    new_start = start + shift
    keep = (tg[None] + shift[:, None]).clamp(max=Tg - 1)
    zb = zb.gather(1, keep[..., None].expand(-1, -1, E))
    W_new = Wp - shift
    # the whole wavefront froze (standing wave of one): continue after the new token from a fresh state (zeros;
    # with α > 0 the host writes the random one before the next step)
    empty = (W_new == 0) & on
    zb = torch.where(empty[:, None, None] & (tg == 0)[None, :, None], 0.0, zb).to(zb.dtype)
    W_new = torch.where(empty, 1, W_new)
    out["prev_start"] = torch.where(on, step_start if rule.reference else new_start, s["prev_start"])
    out["prev_len"] = torch.where(on, W_new, s["prev_len"])
    out["start"] = torch.where(on, new_start, s["start"])
    out["W"] = torch.where(on, W_new, s["W"])
    out["seq_end"] = torch.where(on, torch.maximum(seq_end, n_frozen), s["seq_end"])
    out["steps"] = s["steps"] + on

    # stops among the newly frozen tokens; the length limit; the step cap
    grew = n_frozen > frozen_before
    stop_tok = torch.zeros_like(on)
    if stop_ids is not None:
        span = (positions[None] >= frozen_before[:, None]) & (positions[None] < n_frozen[:, None])
        stop_tok = (torch.isin(seq, stop_ids) & span).any(1) & grew
    long_enough = n_frozen - s["L"] >= s["max_new"]
    capped = ~long_enough & ~stop_tok & (out["steps"] >= s["max_steps"])
    flags = torch.stack([out["W"], n_frozen, grew.long(), stop_tok.long(), long_enough.long(), capped.long(),
                         empty.long()], 1)
    res = (*(out[k] for k in CHANGED), zb, start, W, flags)
    return (*res, delta, lo, a, c) if rule.adaptive else res


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
        self.runner = run = Runner.get(m, opts.slots, cache_length(m, self.Tw + 1), "shared")
        B, S, E, dev = self.slots, run.length, m.config.n_embd, run.device
        self.S, self.E, self.dev = S, E, dev
        self.alpha = p["init_scale"]
        self.rule = StepRule(r=self.r, r_inner=self.r_inner, headway=self.h, eta=p["eta"], beta=p["beta"],
                             beta_schedule=p["beta_schedule"], noise=self.alpha > 0,
                             continuous=p["continuous_compute"], adaptive=self.adaptive, reference=self.reference,
                             prefix=p["freeze_rule"] == "prefix", epsilon=p["epsilon"], r_freeze=self.r_freeze,
                             greedy=opts.select.greedy, stops=bool(opts.stop.ids))
        i64 = dict(dtype=torch.long, device=dev)
        # per absolute position: frozen tokens + proposals, core recurrences, sampler recurrences of the state,
        # stability, the step each token froze at; per slot: pointers and counters (STATE)
        per_position = {"seq": 0, "counter": 0, "age": 0, "stable": 0, "frozen_at": -1}
        for k in STATE:
            setattr(self, k, torch.full((B, S), per_position[k], **i64) if k in per_position else torch.zeros(B, **i64))
        self.prev_e_start, self.prev_e_len = torch.zeros(B, **i64), torch.zeros(B, **i64)
        # the wavefront's states (valid rows first), the previous step's states (for δ) and embeddings (momentum)
        self.z = torch.zeros((B, self.Tw, E), device=dev, dtype=run.dtype)
        self.prev_z, self.prev_e = torch.zeros_like(self.z), torch.zeros_like(self.z)
        self.req: list[Request | None] = [None] * B
        # per slot, on the host: the pointers read back once per step, the block limit, the step cap
        self.host: list[dict | None] = [None] * B
        self.hit_cap = [False] * B
        self.stop_ids = torch.tensor(sorted(opts.stop.ids), **i64) if opts.stop.ids else None
        self.rows = torch.arange(self.Tw, device=dev)

    def check(self, index: int | None, prompt_len: int, max_new_tokens: int) -> None:
        check_fits(self.m, prompt_len, prompt_len + max_new_tokens + 1, index)

    # ------------------------------------------------------------------------------------------ prefill
    def admit(self, entries: list[tuple[int, Request]]) -> None:
        m, p, reqs = self.m, self.p, [q for _, q in entries]
        # the prompts at r recurrences in one parallel pass; their last logits give the first new tokens
        logits, z_last, _ = self.runner.prefill([q.prompt for q in reqs], [b for b, _ in entries], self.r,
                                                self.alpha, [q.generator for q in reqs])
        firsts = [int(self.opts.select(logits[i : i + 1], q.generator)[0]) for i, q in enumerate(reqs)]
        e_first = None
        if p["eta"] > 0:  # momentum buffer: P of each sequence so far (no cache); only its last row is ever used
            T = max(len(q.prompt) for q in reqs) + 1
            ids = torch.tensor([q.prompt + [f] + [0] * (T - 1 - len(q.prompt)) for q, f in zip(reqs, firsts)],
                               device=self.dev)
            at = torch.tensor([len(q.prompt) for q in reqs], device=self.dev)
            e_first = m.embed(ids)[torch.arange(len(reqs), device=self.dev), at]
        for i, (slot, req) in enumerate(entries):
            self._admit(slot, req, firsts[i], z_last[i : i + 1], None if e_first is None else e_first[i])

    def _admit(self, b: int, req: Request, first: int, z_last: Tensor, e_first: Tensor | None) -> None:
        m, p, L, gen = self.m, self.p, len(req.prompt), req.generator
        for t in (self.counter, self.age, self.stable):
            t[b] = 0
        self.frozen_at[b] = -1
        self.seq[b, :L], self.seq[b, L] = torch.tensor(req.prompt, device=self.dev), first
        self.counter[b, :L] = self.r
        self.frozen_at[b, L] = 0
        z0 = m.initial_state(z_last, self.alpha, gen)  # the state for position L, which predicts token L+1
        self.z[b, 0], self.prev_z[b, 0] = z0[0, 0], z0[0, 0]
        if e_first is not None:
            self.prev_e[b, 0] = e_first
        max_steps = p["max_steps"] or 4 * req.max_new_tokens * -(-self.r // self.r_inner)
        for t, v in ((self.start, L), (self.W, 1), (self.n_frozen, L + 1), (self.steps, 0), (self.standing, 0),
                     (self.core_passes, self.r), (self.tokens_forward, self.r * L), (self.seq_end, L + 1),
                     (self.L, L), (self.max_new, req.max_new_tokens), (self.max_steps, max_steps),
                     (self.prev_start, L), (self.prev_len, 1), (self.prev_e_start, L), (self.prev_e_len, 1)):
            t[b] = v
        self.hit_cap[b] = False
        req.data = {**req.data, "stopped_by": "length", "done": False}
        if req.data.get("trace"):
            req.data["recorder"] = _TraceRecorder(L)
        self.req[b] = req
        # the front may run up to `wavefront` positions ahead of the last frozen token
        self.host[b] = {"W": 1, "n_frozen": L + 1, "empty": False,
                        "max_len": min(m.config.block_size, L + req.max_new_tokens + self.cap + self.h + 1)}
        if req.max_new_tokens <= 1:  # the prefill's token is all that was asked for
            req.data["done"] = True

    # ------------------------------------------------------------------------------------------ one step
    def step(self) -> list[int]:
        live = [b for b, q in enumerate(self.req) if q is not None and not q.data["done"]]
        if live:
            self._step(live)
        return [b for b, q in enumerate(self.req) if q is not None and q.data["done"]]

    def _noise(self, shape_rows: list[int], live: list[int], width: int = 1) -> Tensor:
        """Initial states for ``shape_rows[b]`` rows of each live slot, from its own stream (zeros at α = 0), in
        ``(slots, rows, E)`` with at least ``width`` rows (zeros past a slot's own)."""
        out = torch.zeros((self.slots, max(shape_rows + [width]), self.E), device=self.dev, dtype=self.z.dtype)
        if self.alpha > 0:
            for b in live:
                n = shape_rows[b]
                if n:
                    out[b, :n] = self.m.initial_state(out[b : b + 1, :n], self.alpha, self.req[b].generator)[0]
        return out

    def _draws(self, live: list[int], Wh: list[int], hh: list[int], T: int) -> tuple[list[Tensor], list[Tensor]]:
        """Every random draw of this step, from each sequence's own stream in the algorithm's order: a fresh state
        for a wavefront that froze whole in the previous step, noise for β, random ids for extra headway
        positions (written into ``seq`` here: they lie past the wavefront, so the model call does not read them),
        noise for new states. All zeros, and nothing drawn, at α = 0."""
        if self.alpha > 0:
            redo = [b for b in live if self.host[b]["empty"]]
            if redo:
                fresh = self._noise([1 if b in redo else 0 for b in range(self.slots)], redo)
                for b in redo:
                    self.z[b, 0] = self.prev_z[b, 0] = fresh[b, 0]
        # noise for β over the step's T rows (under CUDA graphs T is a power of two above the widest wavefront)
        mix = [self._noise(Wh, live, T)[:, :T]] if self.rule.beta > 0 and self.alpha > 0 else []
        if self.h > 1:
            for b in live:
                if hh[b] > 1:
                    at = self.host[b]["n_frozen"] - 1 + Wh[b] + 1  # after the first new position
                    self.seq[b, at : at + hh[b] - 1] = self._extra_ids(hh[b] - 1, self.req[b].generator)
        grow = []
        if self.alpha > 0:
            if self.rule.continuous:  # random only where the wavefront is shorter than the growth
                grow = [self._noise([hh[b] if Wh[b] < hh[b] else 0 for b in range(self.slots)], live)]
            else:
                grow = [self._noise(hh, live)]
        return mix, grow

    def _model_step(self, T: int, keys: int, on: Tensor, mix: list[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """1.-4. of a step over ``T`` wavefront rows attending to ``keys`` positions: the wavefront's inputs
        (momentum, noise), then P, r' recurrences, C → states, embeddings, logits (one graph per T and keys)."""
        run, rule, eta, ri = self.runner, self.rule, self.p["eta"], self.r_inner

        def model_step(*args: Tensor) -> tuple[Tensor, ...]:
            ids, pos, z, e_mix = run.run(f"gather-{rule}", _with(gather_inputs, rule), args)
            e = run.embed(ids, pos, keys)
            if eta > 0:
                e = e * (1 - eta) + eta * e_mix
            z = run.cores(z, e, pos, keys, ri)
            return z, e, run.decode(z, pos, keys)

        return run.graphed(f"diffusion-{rule}-k{keys}", model_step, self.seq, self.start, self.W, self.z, self.counter,
                           self.prev_e, self.prev_e_start, self.prev_e_len, on, self.rows[:T], *mix)

    def _advance(self, T: int, keys: int, on: Tensor, h: Tensor, z: Tensor, logits: Tensor, extra: list[Tensor]
                 ) -> tuple[Tensor, ...]:
        """5.-6. of a step: proposals, counters, growth, the freeze point, stops (:func:`advance`)."""
        run, rule = self.runner, self.rule

        def after(*args: Tensor) -> tuple[Tensor, ...]:
            return run.run(f"advance-{rule}", _with(advance, rule), args)

        tg = self.rows[: min(self.Tw, T + self.h)]
        return run.graphed(f"advance-diffusion-{rule}-k{keys}", after, *(getattr(self, k) for k in STATE), self.prev_z,
                           on, h, z, logits, self.rows[:T], tg, *extra)

    def capture_graphs(self, shortest: int, longest: int) -> None:
        """Under CUDA graphs, capture now every step graph that sequences of ``shortest`` to ``longest`` positions
        (prompt and new tokens) can meet: each power-of-two wavefront width up to the window (how wide a wavefront
        grows depends on how fast it converges, which no example prompt fixes), with each key count its front can
        reach, and each width of new states' noise. Run with no slot live (``on`` all false): the batch's state is
        not touched; K/V rows written at positions of idle slots are rewritten before any query reads them, as in
        every step. Nothing to do without graphs (the CPU compile path has dynamic shapes)."""
        run, rule = self.runner, self.rule
        if not run.cuda_graphs:
            return
        on = torch.zeros(self.slots, dtype=torch.bool, device=self.dev)
        h = torch.zeros(self.slots, dtype=torch.long, device=self.dev)
        noise = lambda rows: torch.zeros((self.slots, rows, self.E), device=self.dev, dtype=self.z.dtype)  # noqa: E731
        for T in sorted({run.width(n, self.Tw) for n in range(1, self.Tw + 1)}):
            mix = [noise(T)] if rule.beta > 0 and rule.noise else []
            for keys in sorted({run.keys(x) for x in range(shortest + T - 1, longest + T)}):
                z, _, logits = self._model_step(T, keys, on, mix)
                extra = [] if rule.greedy else [torch.zeros((self.slots, T), dtype=torch.long, device=self.dev)]
                extra += [self.stop_ids] if rule.stops else []
                for grow in range(1, self.h + 1) if rule.noise else [None]:
                    self._advance(T, keys, on, h, z, logits, extra + ([] if grow is None else [noise(grow)]))

    def _step(self, live: list[int]) -> None:
        run, rule, eta = self.runner, self.rule, self.p["eta"]
        on_list = [b in live for b in range(self.slots)]
        on = torch.tensor(on_list, device=self.dev)
        Wh = [self.host[b]["W"] if on_list[b] else 0 for b in range(self.slots)]
        # growth: the headway, unless the wavefront (or the block) is full; from host-side pointers, no read-back
        hh = [max(0, min(self.cap - Wh[b], self.h, self.host[b]["max_len"] - (self.host[b]["n_frozen"] - 1 + Wh[b])))
              if on_list[b] else 0 for b in range(self.slots)]
        T = run.width(max(Wh), self.Tw)  # a few static shapes under CUDA graphs
        Tg = min(self.Tw, T + self.h)
        # the furthest query: the last padded row of the slot whose wavefront starts furthest (start = n_frozen - 1)
        keys = run.keys(max(self.host[b]["n_frozen"] - 1 for b in live) + T)
        mix, grow = self._draws(live, Wh, hh, T)
        z, e, logits = self._model_step(T, keys, on, mix)
        extra = [] if rule.greedy else [self._select(logits, live, Wh)]
        extra += [self.stop_ids] if rule.stops else []
        extra += grow
        res = self._advance(T, keys, on, torch.tensor(hh, device=self.dev), z, logits, extra)
        for k, v in zip(CHANGED, res):
            setattr(self, k, v)
        zb, e_start, e_len, flags, *window = res[len(CHANGED):]
        self.z[:, :Tg] = zb
        self.prev_z[:, :Tg] = zb
        if eta > 0:
            self.prev_e[:, :T] = e
            self.prev_e_start, self.prev_e_len = e_start.clone(), e_len.clone()
        flags = flags.tolist()  # the step's one read-back
        traced = [b for b in live if self.req[b].data.get("trace")]
        for b in traced:
            self._record(b, *window)
        for b in live:
            Wb, nf, g, st, full, cap, empty = flags[b]
            d = self.req[b].data
            before = self.host[b]["n_frozen"]
            self.host[b].update(W=Wb, n_frozen=nf, empty=bool(empty))
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

    def _select(self, logits: Tensor, live: list[int], Wh: list[int]) -> Tensor:
        """Sampled proposals ``(B, T)``, each sequence from its own stream (greedy proposals are an argmax inside
        :func:`advance`)."""
        new = torch.zeros(logits.shape[:2], dtype=torch.long, device=self.dev)
        for b in live:
            new[b, : Wh[b]] = self.opts.select(logits[b, : Wh[b]], self.req[b].generator)
        return new

    def _extra_ids(self, n: int, gen: torch.Generator) -> Tensor:
        if self.p["pad_id"] is not None:
            return torch.full((n,), self.p["pad_id"], device=self.dev, dtype=torch.long)
        return torch.randint(0, self.m.config.vocab_size, (n,), device=self.dev, generator=gen)

    def _record(self, b: int, delta: Tensor | None = None, lo: Tensor | None = None, a: Tensor | None = None,
                c: Tensor | None = None) -> None:
        """One trace row of slot ``b`` (only for sequences asked to be traced: host copies are fine here); δ over its
        compared window under adaptive freezing."""
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
        n_frozen, hit_cap = int(self.n_frozen[b]), self.hit_cap[b]
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


