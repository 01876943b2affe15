"""Token-by-token decoding shared by the static and adaptive-compute samplers, for a batch of slots.

Prompts admitted together are prefilled in one padded call (each at r recurrences, or until its own adaptive
exit: :meth:`ARBatch._prefill_exit`), then every step decodes one token for every occupied slot at that slot's own
position. Static depth runs the whole step without a host synchronisation (on CUDA as one captured graph);
adaptive compute reads back "has every row exited?" after each call of the exit piece, the decision that is
adaptive compute. A row that exited keeps its state and its K/V while the others recur.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from recdiff.engine import Record, Request, Runner, Step, cache_length, call_length, get_runner
from recdiff.model import relative_change
from recdiff.params import AdaptiveParams, KVCache, StaticParams
from recdiff.samplers.base import GenerationResult, Options, check_fits


@dataclass(kw_only=True)
class ARRecord(Record):
    steps: list[int] = field(default_factory=list)  # recurrences of each token (entry 0: the prefill's)
    exits: list = field(default_factory=list)  # under an exit gate: the recurrence each token was read out at


class ARBatch:
    def __init__(self, opts: Options, p: StaticParams | AdaptiveParams) -> None:
        m = opts.model
        adaptive = isinstance(p, AdaptiveParams)
        self.opts, self.r, self.init_scale = opts, p.r, p.init_scale
        self.epsilon = p.epsilon if adaptive else None
        self.exit_in_prefill = adaptive and p.exit_in_prefill
        # the exit gate (exit_threshold q): compute_all (static) reads each token out at its exit recurrence and
        # computes them all, as the reference does; else (adaptive) a token stops at its exit
        self.q, self.compute_all = p.exit_threshold, not adaptive
        kv_cache, r = KVCache(p.kv_cache).value, p.r
        self.copy_forward = adaptive and p.exit_kv == "copy" and kv_cache == "per_step"
        self.slots = opts.slots
        length = call_length(opts.longest) if kv_cache == "per_step" else cache_length(m)
        self.kv_shape = (length, r)  # what this call asks of the cache (its stats)
        self.runner = get_runner(m, opts.slots, length, kv_cache, max_steps=r)
        dev = self.runner.device
        self.ids = torch.zeros((self.slots, 1), dtype=torch.long, device=dev)
        self.pos = torch.zeros((self.slots, 1), dtype=torch.long, device=dev)
        self.req: list[Request | None] = [None] * self.slots

    def check(self, index: int | None, prompt_len: int, max_new_tokens: int) -> None:
        check_fits(self.opts.model, prompt_len, prompt_len + max_new_tokens, index)

    # ------------------------------------------------------------------------------------------ prefill
    def admit(self, entries: list[tuple[int, Request]]) -> None:
        slots, reqs = [b for b, _ in entries], [q for _, q in entries]
        prompts, gens = [q.prompt for q in reqs], [q.generator for q in reqs]
        exits = [None] * len(prompts)
        if self.q is not None:
            logits, exits = self._prefill_gate(prompts, slots, gens)
            steps = [self.r] * len(prompts)
        elif self.epsilon is not None and self.exit_in_prefill:
            logits, steps = self._prefill_exit(prompts, slots, gens)
        else:
            logits, _ = self.runner.prefill(prompts, slots, self.r, self.init_scale, gens)
            steps = [self.r] * len(prompts)
        for i, (slot, req) in enumerate(entries):
            L = len(req.prompt)
            tok = int(self.opts.select(logits[i : i + 1], req.generator)[0])
            req.record = ARRecord(core_passes=steps[i], tokens_forward=steps[i] * L, exits=[exits[i]])
            self.req[slot] = req
            self._append(slot, tok, steps[i])
            self.ids[slot, 0], self.pos[slot, 0] = tok, L

    def _prefill_exit(self, prompts: list[list[int]], slots: list[int], gens: list[torch.Generator]
                      ) -> tuple[torch.Tensor, list[int]]:
        """The prompts prefilled with adaptive exits: each runs until the mean δ over its own positions falls below ε
        (at most r recurrences), then keeps its state and K/V while the others go on; the mean is taken over the
        prompt alone and compared on the host, exactly as for the prompt prefilled by itself. Returns the last
        prompt position's logits ``(n, V)`` and each prompt's recurrences."""
        run, n = self.runner, len(prompts)
        p = run.prefill_start(prompts, slots, self.init_scale, gens)
        z, steps, exited = p.z0, [self.r] * n, [False] * n
        for k in range(self.r):
            # an exited row keeps its K/V (a duplicated row, as its prompt)
            write = torch.tensor([not x for x in exited + exited[: int(p.dup)]], device=run.device)
            z_new = run.cores(z, p.e, p.pos, p.T, 1, p.rows, write, step0=k)
            delta = relative_change(z_new, z)
            means = torch.stack([delta[i, : p.lens[i]].mean() for i in range(n)]).tolist()
            z = torch.where(~write[:, None, None], z, z_new)
            for i in range(n):
                if not exited[i] and means[i] < self.epsilon:
                    exited[i], steps[i] = True, k + 1
            if all(exited):
                break
        return run.prefill_end(p, z)[0], steps

    def _prefill_gate(self, prompts: list[list[int]], slots: list[int], gens: list[torch.Generator]
                      ) -> tuple[torch.Tensor, list[int]]:
        """The prompts prefilled at r recurrences, every one computed (the gate only picks the readout, as the
        reference computes a prompt), the last position read out at its exit recurrence. Returns its logits
        ``(n, V)`` and each prompt's exit recurrence."""
        run = self.runner
        p = run.prefill_start(prompts, slots, self.init_scale, gens)
        gate = Gate(p.z0, self.r, self.q)
        z = p.z0
        for k in range(self.r):
            z = run.cores(z, p.e, p.pos, p.T, 1, p.rows, step0=k)
            gate.update(self.opts.model.exit_probability(z), z, k)
        logits, _ = run.prefill_end(p, gate.chosen)
        last = torch.tensor(p.lens, device=run.device) - 1
        return logits, gate.at[torch.arange(len(prompts), device=run.device), last].tolist()

    def _append(self, slot: int, tok: int, steps: int) -> None:
        d: ARRecord = self.req[slot].record
        d.tokens.append(tok)
        d.steps.append(steps)
        stop = self.opts.stop.first_stop(d.tokens, len(d.tokens) - 1)
        if stop:
            d.stopped_by, d.done = stop[1], True
        elif len(d.tokens) >= self.req[slot].max_new_tokens:
            d.done = True

    # ------------------------------------------------------------------------------------------ one token
    def step(self) -> list[int]:
        live = [b for b, q in enumerate(self.req) if q is not None and not q.record.done]
        if live:
            m, run = self.opts.model, self.runner
            gens = [q.generator if q is not None and b in live else None for b, q in enumerate(self.req)]
            if self.init_scale > 0:  # each sequence draws its initial state from its own stream
                dim = m.config.state_width
                z0 = torch.zeros((self.slots, 1, dim), device=run.device, dtype=run.dtype)
                for b in live:
                    z0[b] = m.initial_state(z0[b : b + 1], self.init_scale, gens[b])[0]
            else:
                z0 = None
            # the furthest position decoded this step: the prompt plus the tokens so far, less the new one
            keys = run.keys(max(len(self.req[b].prompt) + len(self.req[b].record.tokens) for b in live))
            # rows without a live sequence may sit further on: keep every query inside the keys (its own row only)
            pos = self.pos.clamp(max=keys - 1)
            exits = None
            if self.q is not None and self.compute_all:
                logits, exits = self._static_gate(pos, z0, keys)
                taken = None
            elif self.epsilon is None and self.q is None:
                logits, taken = self._static(pos, z0, keys), None
            else:
                logits, taken = self._adaptive(pos, z0, live, keys)
                if self.copy_forward:  # an exited token's last K/V stand in at the recurrences it skipped
                    run.cache.copy_forward(pos[:, 0], taken, self.r)
            new = self.opts.select.rows(logits, gens)
            # the step's one read-back (adaptive compute: besides its exit checks): the tokens and recurrences taken
            if taken is None and exits is None:
                toks, steps = new.tolist(), [self.r] * self.slots
            elif exits is not None:
                toks, exits = torch.stack([new, exits]).tolist()
                steps = [self.r] * self.slots
            else:
                toks, steps = torch.stack([new, taken]).tolist()
            for b in live:
                d = self.req[b].record
                d.core_passes += steps[b]
                d.tokens_forward += steps[b]
                d.exits.append(steps[b] if exits is None else exits[b])
                self._append(b, toks[b], steps[b])
            self.ids[:, 0] = new
            self.pos += 1
            self.pos.clamp_(max=run.length - 1)  # rows without a live sequence must stay inside the buffers
        return [b for b, q in enumerate(self.req) if q is not None and q.record.done]

    def _static(self, pos: torch.Tensor, z0: torch.Tensor | None, keys: int) -> torch.Tensor:
        run = self.runner
        if z0 is None:
            z0 = torch.zeros((self.slots, 1, self.opts.model.config.state_width), device=run.device, dtype=run.dtype)
        return run.step(Step(token_step, (self.r, keys)), self.ids, pos, z0)

    def _static_gate(self, pos: torch.Tensor, z0: torch.Tensor | None, keys: int
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every recurrence of a token step, each token read out at its exit recurrence: logits and those
        recurrences (1-based)."""
        run = self.runner
        if z0 is None:
            z0 = torch.zeros((self.slots, 1, self.opts.model.config.state_width), device=run.device, dtype=run.dtype)
        return run.step(Step(gate_token_step, (self.r, self.q, keys)), self.ids, pos, z0)

    def _adaptive(self, pos: torch.Tensor, z0: torch.Tensor | None, live: list[int], keys: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        run = self.runner
        e = run.embed(self.ids, pos, keys)
        z = run.model.initial_state(e, 0.0) if z0 is None else z0
        exited = torch.ones(self.slots, dtype=torch.bool, device=run.device)
        exited[live] = False  # free and finished slots take no part
        carry: tuple[torch.Tensor, ...] = (exited, torch.zeros(self.slots, dtype=torch.long, device=run.device))
        if self.q is not None:  # the gate's cumulative exit probability (float32) and that of no exit yet
            carry += (torch.zeros(self.slots, device=run.device), torch.ones(self.slots, device=run.device))
        k = 0
        while k < self.r:
            n = run.chunk if self.r - k >= run.chunk else 1
            z, *rest = run.cores_exit(z, e, carry, pos, keys, n, k, self.epsilon, self.q)
            carry = tuple(rest)
            k += n
            # the exit decision: one read-back per call (compiled: every run.chunk recurrences; recurrences after
            # every row exited change nothing)
            if k < self.r and bool(carry[0].all()):
                break
        return run.decode(z, pos, keys)[:, -1], carry[1]

    def finish(self, slot: int) -> GenerationResult:
        req, self.req[slot] = self.req[slot], None
        d: ARRecord = req.record
        stats = {
            "core_passes": d.core_passes,
            "tokens_forward": d.tokens_forward,
            "steps": len(d.steps),
            "new_tokens": len(d.tokens),
            "steps_per_token": d.steps,  # entry 0 is the prefill call
            **({"exit_steps": d.exits} if self.q is not None else {}),  # the recurrence each token was read at
            "kv_cache_bytes": self.runner.cache.bytes_per_slot(*self.kv_shape),
        }
        return GenerationResult(tokens=d.tokens, stats=stats, stopped_by=d.stopped_by)


def token_step(c: tuple[int, int], run: Runner, ids: torch.Tensor, pos: torch.Tensor, z: torch.Tensor
               ) -> torch.Tensor:
    """One token of static depth (``c``: r, keys): P, r recurrences from ``z``, C → the logits ``(B, V)``."""
    r, keys = c
    return run.recur(ids, pos, r, z, keys=keys)[:, -1]


def gate_token_step(c: tuple[int, float, int], run: Runner, ids: torch.Tensor, pos: torch.Tensor, z: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of static depth read out at its exit gate's recurrence (``c``: r, q, keys): logits ``(B, V)`` and
    that recurrence (1-based)."""
    r, q, keys = c
    e = run.embed(ids, pos, keys)
    gate = Gate(z, r, q)
    for k in range(r):
        z = run.cores(z, e, pos, keys, 1, step0=k)
        gate.update(run.model.exit_probability(z), z, k)
    return run.decode(gate.chosen, pos, keys)[:, -1], gate.at[:, -1]


class Gate:
    """An exit gate's readout, as the Ouro reference computes it: λ_t of each recurrence's state, p_t = λ_t × the
    probability of no earlier exit (the rest at the last recurrence), and the exit the first recurrence whose
    cumulative p reaches q, in that order of float32 operations (q = 1 is decided by its rounding). ``chosen``: each
    position's state at its exit; ``at``: that recurrence, 1-based."""

    def __init__(self, like: torch.Tensor, r: int, q: float) -> None:
        shape = like.shape[:-1]
        self.r, self.q = r, q
        self.cum = torch.zeros(shape, device=like.device)
        self.rem = torch.ones(shape, device=like.device)
        self.done = torch.zeros(shape, dtype=torch.bool, device=like.device)
        self.at = torch.full(shape, r, dtype=torch.long, device=like.device)
        self.chosen = torch.zeros_like(like)

    def update(self, lam: torch.Tensor, z: torch.Tensor, k: int) -> None:
        p = lam * self.rem if k < self.r - 1 else self.rem
        self.rem = self.rem * (1 - lam)
        self.cum = self.cum + p
        newly = ~self.done & ((self.cum >= self.q) | (k == self.r - 1))
        self.chosen = torch.where(newly[..., None], z, self.chosen)
        self.at = torch.where(newly, k + 1, self.at)
        self.done = self.done | newly
