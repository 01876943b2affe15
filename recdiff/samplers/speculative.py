"""Self-speculative decoding: draft ``lookahead`` tokens with r_draft recurrences each, verify them in one
parallel pass at r, keep the agreeing prefix plus the verifier's token at the first disagreement.

As in the authors' reference, a draft is accepted where it equals the verifier's argmax; when every draft
token is accepted no bonus token is added (the verifier has no logits past the last draft). Under sampling the
drafts and the correction token are sampled, the acceptance test stays the argmax comparison.

Batched: every occupied slot drafts and verifies in the same round, at its own positions; drafts stay on the
device and the round reads back once (drafts and verdicts). Near the end of the block a sequence may have room
for fewer drafts than ``lookahead``; its extra rows are computed and ignored, as if it had drafted fewer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from recdiff.engine import Record, Request, Runner, Step, cache_length, call_length, get_runner
from recdiff.params import KVCache, SpeculativeParams
from recdiff.samplers.base import GenerationResult, Options, check_fits


@dataclass(kw_only=True)
class SpecRecord(Record):
    committed: int  # positions whose K/V are kept (prompt and accepted tokens)
    max_len: int  # the furthest a draft may reach
    stop: tuple[int, str] | None = None  # a stop found: (tokens to keep, reason)
    accepted: list[int] = field(default_factory=list)  # drafts accepted per round
    rows: int = 1  # rows of the next call that draw initial states (α > 0)


class SpeculativeBatch:
    def __init__(self, opts: Options, p: SpeculativeParams) -> None:
        m = opts.model
        self.opts, self.slots = opts, opts.slots
        self.r, self.r_draft, self.lookahead, self.init_scale = p.r, p.r_draft, p.lookahead, p.init_scale
        kv_cache = KVCache(p.kv_cache).value
        # drafting may run up to lookahead positions past the last kept token
        length = (call_length(opts.longest, self.lookahead) if kv_cache == "per_step"
                  else cache_length(m, self.lookahead))
        self.kv_shape = (length, max(self.r, self.r_draft))  # what this call asks of the cache (its stats)
        self.runner = get_runner(m, opts.slots, length, kv_cache, max_steps=self.kv_shape[1])
        self.req: list[Request | None] = [None] * self.slots
        dev = self.runner.device
        self.last = torch.zeros((self.slots, 1), dtype=torch.long, device=dev)
        self.committed = torch.zeros(self.slots, dtype=torch.long, device=dev)

    def check(self, index: int | None, prompt_len: int, max_new_tokens: int) -> None:
        check_fits(self.opts.model, prompt_len, prompt_len + max_new_tokens, index)

    def _init(self, rows: int, live: list[int]) -> torch.Tensor | None:
        """Initial states ``(slots, rows, E)``, each live sequence drawing from its own stream (None: zeros)."""
        if self.init_scale <= 0:
            return None
        m, run = self.opts.model, self.runner
        z = torch.zeros((self.slots, rows, m.config.state_width), device=run.device, dtype=run.dtype)
        for b in live:
            n = self.req[b].record.rows
            z[b, :n] = m.initial_state(z[b : b + 1, :n], self.init_scale, self.req[b].generator)[0]
        return z

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor, depth: int, z: torch.Tensor | None, keys: int
                 ) -> torch.Tensor:
        run = self.runner
        if z is None:
            z = torch.zeros((*ids.shape, self.opts.model.config.state_width), device=run.device, dtype=run.dtype)
        # rows without a live sequence may sit further on: keep every query inside the keys (its own row only)
        pos = pos.clamp(max=keys - 1)
        return run.step(Step(recur_step, (depth, keys)), ids, pos, z)

    # ------------------------------------------------------------------------------------------ prefill
    def admit(self, entries: list[tuple[int, Request]]) -> None:
        m, reqs = self.opts.model, [q for _, q in entries]
        logits, _ = self.runner.prefill([q.prompt for q in reqs], [b for b, _ in entries], self.r, self.init_scale,
                                        [q.generator for q in reqs])
        for i, (slot, req) in enumerate(entries):
            L = len(req.prompt)
            tok = int(self.opts.select(logits[i : i + 1], req.generator)[0])
            req.record = SpecRecord(tokens=[tok], core_passes=self.r, tokens_forward=self.r * L, committed=L,
                                    max_len=min(L + req.max_new_tokens + self.lookahead, m.config.block_size),
                                    stop=self.opts.stop.first_stop([tok], 0))
            self.req[slot] = req
            self.last[slot, 0], self.committed[slot] = tok, L

    def _done(self, d: SpecRecord, max_new: int) -> bool:
        return d.stop is not None or len(d.tokens) >= max_new

    # ------------------------------------------------------------------------------------------ one round
    def step(self) -> list[int]:
        live = [b for b, q in enumerate(self.req) if q is not None and not self._done(q.record, q.max_new_tokens)]
        if live:
            self._round(live)
        return [b for b, q in enumerate(self.req) if q is not None and self._done(q.record, q.max_new_tokens)]

    def _round(self, live: list[int]) -> None:
        run, lookahead, sel = self.runner, self.lookahead, self.opts.select
        gens = [q.generator if q is not None and b in live else None for b, q in enumerate(self.req)]
        n_draft = [0] * self.slots
        for b in live:
            d = self.req[b].record
            n_draft[b] = max(0, min(lookahead, d.max_len - d.committed))
        drafts = torch.zeros((self.slots, lookahead), dtype=torch.long, device=run.device)
        # the furthest position this round reads: the last verified one
        keys = run.keys(max(self.req[b].record.committed for b in live) + lookahead)
        last = self.last.clone()
        for j in range(lookahead):  # drafting: each token at r_draft, fed straight back on the device
            for b in live:
                self.req[b].record.rows = 1
            drafting = [b for b in live if j < n_draft[b]]
            z = self._init(1, drafting)
            logits = self._forward(last, (self.committed + j)[:, None], self.r_draft, z, keys)[:, -1]
            last = sel.rows(logits, [g if b in drafting else None for b, g in enumerate(gens)])[:, None]
            drafts[:, j] = last[:, 0]
        # verify: positions committed … committed+lookahead-1 hold the last token and drafts[:-1], which they predict
        ids = torch.cat([self.last, drafts[:, :-1]], dim=1)
        for b in live:
            self.req[b].record.rows = max(1, n_draft[b])
        z = self._init(lookahead, live)
        pos = self.committed[:, None] + torch.arange(lookahead, device=run.device)
        logits = self._forward(ids, pos, self.r, z, keys)
        verified = logits.argmax(-1)
        # the round's one read-back (under sampling, a second: the tokens drawn where a draft was rejected)
        host_drafts, host_verified = torch.stack([drafts, verified]).tolist()
        kept, drawn = {}, {}
        for b in live:
            k = n_draft[b]
            draft = host_drafts[b][:k]
            n_ok = next((i for i, (a, c) in enumerate(zip(host_verified[b], draft)) if a != c), k)
            kept[b] = (n_ok, draft[:n_ok])
            if n_ok < k or not draft:  # (no draft only where the block size ends the sequence)
                if sel.greedy:
                    kept[b][1].append(host_verified[b][n_ok])
                else:
                    drawn[b] = sel(logits[b, n_ok : n_ok + 1], self.req[b].generator)
        if drawn:
            for b, tok in zip(drawn, torch.cat(list(drawn.values())).tolist()):
                kept[b][1].append(tok)
        for b in live:
            d, k, (n_ok, new) = self.req[b].record, n_draft[b], kept[b]
            d.accepted.append(n_ok)
            d.core_passes += k * self.r_draft + self.r
            d.tokens_forward += k * self.r_draft + self.r * max(1, k)
            d.committed += len(new)  # K/V written for rejected positions lie past the pointer and get overwritten
            before = len(d.tokens)
            d.tokens.extend(new)
            d.stop = self.opts.stop.first_stop(d.tokens, before)
            self.last[b, 0], self.committed[b] = d.tokens[-1], d.committed

    def finish(self, slot: int) -> GenerationResult:
        req, self.req[slot] = self.req[slot], None
        d, tokens, stopped_by = req.record, req.record.tokens, "length"
        if d.stop:
            tokens, stopped_by = tokens[: d.stop[0]], d.stop[1]
        tokens = tokens[: req.max_new_tokens]
        stats = {
            "core_passes": d.core_passes,
            "tokens_forward": d.tokens_forward,
            # forward calls: prefill, then a draft phase and a verify pass per round
            "steps": 1 + len(d.accepted) * 2,
            "rounds": len(d.accepted),
            "accepted_per_round": d.accepted,
            "new_tokens": len(tokens),
            "kv_cache_bytes": self.runner.cache.bytes_per_slot(*self.kv_shape),
        }
        return GenerationResult(tokens=tokens, stats=stats, stopped_by=stopped_by)


make_batch = SpeculativeBatch


def recur_step(c: tuple[int, int], run: Runner, ids: torch.Tensor, pos: torch.Tensor, z: torch.Tensor
               ) -> torch.Tensor:
    """Tokens at static depth (``c``: depth, keys): P, the recurrences from ``z``, C → logits ``(B, T, V)``."""
    depth, keys = c
    return run.recur(ids, pos, depth, z, keys)
