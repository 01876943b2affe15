"""Token-by-token decoding shared by the static and adaptive-compute samplers, for a batch of slots.

Prompts admitted together are prefilled in one padded call (each at r recurrences, or until its own adaptive
exit: :meth:`ARBatch._prefill_exit`), then every step decodes one token for every occupied slot at that slot's own
position. Static depth runs the whole step without a host synchronisation (on CUDA as one captured graph);
adaptive compute reads back "has every row exited?" after each call of the exit piece, the decision that is
adaptive compute. A row that exited keeps its state and its K/V while the others recur.
"""

from __future__ import annotations

import torch

from recdiff.engine.pool import cache_length, get_runner
from recdiff.engine.scheduler import Request
from recdiff.model import relative_change
from recdiff.samplers.base import GenerationResult, Options, check_fits


class ARBatch:
    def __init__(self, opts: Options, r: int, init_scale: float, kv_cache: str, epsilon: float | None,
                 exit_in_prefill: bool = True) -> None:
        m = opts.model
        self.opts, self.r, self.init_scale, self.epsilon = opts, r, init_scale, epsilon
        self.exit_in_prefill = exit_in_prefill
        self.slots = opts.slots
        self.runner = get_runner(m, opts.slots, cache_length(m), kv_cache, max_steps=r)
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
        if self.epsilon is not None and self.exit_in_prefill:
            logits, steps = self._prefill_exit(prompts, slots, gens)
        else:
            logits, _ = self.runner.prefill(prompts, slots, self.r, self.init_scale, gens)
            steps = [self.r] * len(prompts)
        for i, (slot, req) in enumerate(entries):
            L = len(req.prompt)
            tok = int(self.opts.select(logits[i : i + 1], req.generator)[0])
            req.data = {"tokens": [], "steps": [], "core_passes": steps[i], "tokens_forward": steps[i] * L,
                        "stopped_by": "length", "done": False}
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

    def _append(self, slot: int, tok: int, steps: int) -> None:
        d = self.req[slot].data
        d["tokens"].append(tok)
        d["steps"].append(steps)
        stop = self.opts.stop.first_stop(d["tokens"], len(d["tokens"]) - 1)
        if stop:
            d["stopped_by"], d["done"] = stop[1], True
        elif len(d["tokens"]) >= self.req[slot].max_new_tokens:
            d["done"] = True

    # ------------------------------------------------------------------------------------------ one token
    def step(self) -> list[int]:
        live = [b for b, q in enumerate(self.req) if q is not None and not q.data["done"]]
        if live:
            m, run = self.opts.model, self.runner
            gens = [q.generator if q is not None and b in live else None for b, q in enumerate(self.req)]
            if self.init_scale > 0:  # each sequence draws its initial state from its own stream
                dim = m.config.n_embd
                z0 = torch.zeros((self.slots, 1, dim), device=run.device, dtype=run.dtype)
                for b in live:
                    z0[b] = m.initial_state(z0[b : b + 1], self.init_scale, gens[b])[0]
            else:
                z0 = None
            # the furthest position decoded this step: the prompt plus the tokens so far, less the new one
            keys = run.keys(max(len(self.req[b].prompt) + len(self.req[b].data["tokens"]) for b in live))
            # rows without a live sequence may sit further on: keep every query inside the keys (its own row only)
            pos = self.pos.clamp(max=keys - 1)
            if self.epsilon is None:
                logits, taken = self._static(pos, z0, keys), None
            else:
                logits, taken = self._adaptive(pos, z0, live, keys)
            new = self.opts.select.rows(logits, gens)
            # the step's one read-back (adaptive compute: besides its exit checks): the tokens and recurrences taken
            if taken is None:
                toks, steps = new.tolist(), [self.r] * self.slots
            else:
                toks, steps = torch.stack([new, taken]).tolist()
            for b in live:
                d = self.req[b].data
                d["core_passes"] += steps[b]
                d["tokens_forward"] += steps[b]
                self._append(b, toks[b], steps[b])
            self.ids[:, 0] = new
            self.pos += 1
            self.pos.clamp_(max=run.length - 1)  # rows without a live sequence must stay inside the buffers
        return [b for b, q in enumerate(self.req) if q is not None and q.data["done"]]

    def _static(self, pos: torch.Tensor, z0: torch.Tensor | None, keys: int) -> torch.Tensor:
        run, r = self.runner, self.r

        def token_step(ids: torch.Tensor, pos: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
            return run.recur(ids, pos, r, z, keys=keys)[:, -1]

        if z0 is None:
            z0 = torch.zeros((self.slots, 1, self.opts.model.config.n_embd), device=run.device, dtype=run.dtype)
        return run.graphed(f"static-r{r}-k{keys}", token_step, self.ids, pos, z0)

    def _adaptive(self, pos: torch.Tensor, z0: torch.Tensor | None, live: list[int], keys: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        run = self.runner
        e = run.embed(self.ids, pos, keys)
        z = torch.zeros_like(e) if z0 is None else z0
        exited = torch.ones(self.slots, dtype=torch.bool, device=run.device)
        exited[live] = False  # free and finished slots take no part
        taken = torch.zeros(self.slots, dtype=torch.long, device=run.device)
        k = 0
        while k < self.r:
            n = run.chunk if self.r - k >= run.chunk else 1
            z, exited, taken = run.cores_exit(z, e, exited, taken, pos, keys, n, self.epsilon, k)
            k += n
            # the exit decision: one read-back per call (compiled: every run.chunk recurrences; recurrences after
            # every row exited change nothing)
            if k < self.r and bool(exited.all()):
                break
        return run.decode(z, pos, keys)[:, -1], taken

    def finish(self, slot: int) -> GenerationResult:
        req, self.req[slot] = self.req[slot], None
        d = req.data
        tokens = d["tokens"]
        stats = {
            "core_passes": d["core_passes"],
            "tokens_forward": d["tokens_forward"],
            "steps": len(d["steps"]),
            "new_tokens": len(tokens),
            "steps_per_token": d["steps"],  # entry 0 is the prefill call
            "kv_cache_bytes": self.runner.cache.bytes_per_slot(),
        }
        return GenerationResult(tokens=tokens, stats=stats, stopped_by=d["stopped_by"])
