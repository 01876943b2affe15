"""Pipelined self-speculative decoding (LoopSpec: kaist-flexml-lab/loopspec), for a batch of slots.

A prompt is prefilled at the full depth ``r`` (S), every recurrence's K/V in its own plane, and the coda's at each
readout depth too (:data:`recdiff.cache.READOUTS`): its first token is the full-depth readout's. Then every *cycle*
runs ``r_draft`` (K) recurrences of every live lane of every sequence in one core call per recurrence, each lane at
its own depth (:mod:`recdiff.samplers.lanes` keeps the lanes): a new lane's P first, then the recurrences, then the
coda of the lanes that reached a readout depth. A readout at depth K (and at ``r_draft2``, K·X) proposes the next
token, which starts a child lane; the readout at S commits it (:meth:`lanes.Tree.commit`). Each depth has its own
K/V timeline: a lane at recurrence d attends to the K/V of recurrence d of the committed prefix and of its own
ancestors, as static AR with per-step caches computes, so greedy output is exactly static AR's at r
(``kv_cache="per_step"``) and sampled output has its distribution (:mod:`recdiff.samplers.rejection`).

Per committed token the sequence waits K recurrences when q1 was right, K·X when q2 was, S when neither; all lanes
together still run S recurrences per token (and those of dropped lanes): width for latency.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from recdiff.cache import READOUTS
from recdiff.engine import Record, Request, Runner, Step, call_length, get_runner
from recdiff.params import LoopSpecParams
from recdiff.samplers import rejection
from recdiff.samplers.base import GenerationResult, Options, check_fits
from recdiff.samplers.lanes import Lane, Schedule, Tree

FINAL = READOUTS - 1           # the coda plane of the full-depth readout


@dataclass(kw_only=True)
class LoopSpecRecord(Record):
    slot: int
    tree: Tree  # its lanes; tokens: the tree's committed tokens (the same list)
    cycles: int = 0
    q1: list[int] = field(default_factory=lambda: [0, 0])  # first readouts checked, right
    q2: list[int] = field(default_factory=lambda: [0, 0])  # second readouts checked, right
    peak_lanes: int = 0
    accepted: list[int] = field(default_factory=list)  # per committed token after the first: 1 q1, 2 q2, 0 neither


class LoopSpecBatch:
    def __init__(self, opts: Options, p: LoopSpecParams) -> None:
        m = opts.model
        self.opts, self.slots, self.init_scale = opts, opts.slots, p.init_scale
        self.schedule = Schedule(p.r, p.r_draft, p.r_draft2)
        self.lanes_per_seq = self.schedule.max_lanes
        # A row holds the longest sequence of the call, then the side places of lanes on a branch of their own, then
        # room for a padding row's place: every depth has a plane (r of the core's, three of the coda's), so rows are
        # sized to the call, not to the block (Huginn-0125's block in 136 planes at batch 32 would not fit a GPU)
        base = call_length(opts.longest)
        self.side = list(range(base, base + self.schedule.side_places))
        length = call_length(opts.longest, len(self.side) + 1)
        self.kv_shape = (length, self.schedule.S)  # what this call asks of the cache (its stats)
        self.runner = get_runner(m, opts.slots, length, "lanes", max_steps=self.schedule.S)
        run = self.runner
        # every lane's state and P output, in a bank row of its own; the last row is padding rows' (graphs, compile)
        n = self.slots * self.lanes_per_seq + 1
        self.z = run.buffer("loopspec-z", (n, 1, m.config.state_width), run.dtype)
        self.e = run.buffer("loopspec-e", (n, 1, m.config.n_embd), run.dtype)
        self.pad_bank = n - 1
        self.free_bank = list(range(n - 2, -1, -1))
        self.req: list[Request | None] = [None] * self.slots

    def check(self, index: int | None, prompt_len: int, max_new_tokens: int) -> None:
        check_fits(self.opts.model, prompt_len, prompt_len + max_new_tokens, index)

    # ------------------------------------------------------------------------------------------ prefill
    def admit(self, entries: list[tuple[int, Request]]) -> None:
        run, sch = self.runner, self.schedule
        reqs = [q for _, q in entries]
        p = run.prefill_start([q.prompt for q in reqs], [b for b, _ in entries], self.init_scale,
                              [q.generator for q in reqs])
        z, depth = p.z0, 0
        coda = self.opts.model.config.n_layers_in_coda > 0
        for end, plane in sorted(sch.readouts.items()):  # the coda's K/V at every readout depth, for the drafts
            if coda or end == sch.S - 1:
                z = run.cores(z, p.e, p.pos, p.T, end + 1 - depth, p.rows, step0=depth)
                depth = end + 1
                logits = run.decode(z, p.pos, p.T, p.rows, plane=plane)
        last = torch.tensor(p.lens, device=run.device) - 1
        logits = logits[torch.arange(len(p.lens), device=run.device), last]
        for i, (slot, req) in enumerate(entries):
            tok = int(self.opts.select(logits[i : i + 1], req.generator)[0])
            L = len(req.prompt)
            tree = Tree(L, self.side)
            req.record = LoopSpecRecord(slot=slot, tree=tree, tokens=tree.tokens, core_passes=sch.S,
                                        tokens_forward=sch.S * L)
            self.req[slot] = req
            self._commit_first(req, tok)

    def _commit_first(self, req: Request, tok: int) -> None:
        tree = req.record.tree
        tree.tokens.append(tok)
        if not self._stops(req):
            self._start(req, 1, tok, None, None)

    def _stops(self, req: Request) -> bool:
        """Whether the last committed token ends the sequence."""
        d, tokens = req.record, req.record.tree.tokens
        stop = self.opts.stop.first_stop(tokens, len(tokens) - 1)
        if stop:
            del tokens[stop[0]:]
            d.stopped_by, d.done = stop[1], True
        elif len(tokens) >= req.max_new_tokens:
            d.done = True
        return d.done

    def _start(self, req: Request, index: int, token: int, parent: Lane | None, origin: int | None) -> Lane:
        return req.record.tree.start(index, token, self.free_bank.pop(), parent, origin)

    def _release(self, lanes: list[Lane]) -> None:
        self.free_bank.extend(lane.bank for lane in lanes)

    # ------------------------------------------------------------------------------------------ one cycle
    def step(self) -> list[int]:
        live = [b for b, q in enumerate(self.req) if q is not None and not q.record.done]
        if live:
            self._cycle(live)
        return [b for b, q in enumerate(self.req) if q is not None and q.record.done]

    def _cycle(self, live: list[int]) -> None:
        run, sch = self.runner, self.schedule
        lanes = [(b, lane) for b in live for lane in self.req[b].record.tree.lanes]
        for b in live:
            d = self.req[b].record
            d.cycles += 1
            d.core_passes += sch.K * len(d.tree.lanes)
            d.tokens_forward += sch.K * len(d.tree.lanes)
            d.peak_lanes = max(d.peak_lanes, len(d.tree.lanes))
        # the keys every call of the cycle attends to, and one place past them for padding rows
        needed = max(max(self.req[b].record.tree.committed_end for b in live),
                     max(lane.slot for _, lane in lanes) + 1) + 1
        keys = run.keys(needed)
        junk = keys - 1
        new = [(b, lane) for b, lane in lanes if lane.stage == 0]
        if new:
            self._embed(new, keys, junk)
        most = self.slots * self.lanes_per_seq
        rows = self._rows(lanes, run.width(len(lanes), most), keys, junk)
        bank = rows["bank"]
        z = run.step(Step(_lane_cores, (sch.K, keys)), self.z[bank], self.e[bank], rows["pos"], rows["slot"],
                        rows["visible"], rows["rows"], rows["stage"])
        self.z[bank[: len(lanes)]] = z[: len(lanes)]
        out = [(i, b, lane) for i, (b, lane) in enumerate(lanes) if lane.stage + sch.K - 1 in sch.readouts]
        if out:
            ro = self._rows([(b, lane) for _, b, lane in out], run.width(len(out), most), keys, junk)
            pad = len(ro["pos"]) - len(out)
            at = torch.tensor([i for i, _, _ in out] + [0] * pad, device=run.device)
            plane = torch.tensor([sch.readouts[lane.stage + sch.K - 1] for _, _, lane in out] + [0] * pad,
                                 device=run.device)
            logits = run.step(Step(_lane_decode, (keys,)), z[at], ro["pos"], ro["slot"], ro["visible"],
                                 ro["rows"], plane)[: len(out), -1]
            self._decide(out, logits)
        for _, lane in lanes:
            lane.stage += sch.K

    def _rows(self, lanes: list[tuple[int, Lane]], width: int, keys: int, junk: int) -> dict[str, Tensor]:
        """The call arguments of ``lanes`` padded to ``width`` rows: a padding row sits at the junk place of cache
        row 0 and sees only that place (no lane's place, never another row's keys). Two host-to-device copies."""
        run, n = self.runner, len(lanes)
        trees = [self.req[b].record.tree for b, _ in lanes]
        meta = [[lane.token, lane.pos, lane.slot, b, lane.stage, lane.bank, tree.committed_end]
                for (b, lane), tree in zip(lanes, trees)]
        meta += [[0, 0, junk, 0, 0, self.pad_bank, 0]] * (width - n)
        t = torch.tensor(meta, dtype=torch.long, device=run.device).T.contiguous()   # (7, width)
        cols = [(i, s) for i, ((_, lane), tree) in enumerate(zip(lanes, trees)) for s in tree.visible(lane)]
        cols += [(i, junk) for i in range(n, width)]
        at = torch.tensor(cols, device=run.device).T
        visible = run.key_range[:keys][None, :] < t[6][:, None]
        visible[at[0], at[1]] = True
        return {"ids": t[0][:, None], "pos": t[1][:, None], "slot": t[2][:, None], "rows": t[3], "stage": t[4],
                "bank": t[5], "visible": visible}

    def _embed(self, new: list[tuple[int, Lane]], keys: int, junk: int) -> None:
        """P of the lanes that start this cycle, and their initial states (zeros, or InitState(α) from each
        sequence's own stream)."""
        run, m = self.runner, self.opts.model
        rows = self._rows(new, run.width(len(new), self.slots * self.lanes_per_seq), keys, junk)
        e = run.step(Step(_lane_embed, (keys,)), rows["ids"], rows["pos"], rows["slot"], rows["visible"],
                        rows["rows"])
        bank = rows["bank"][: len(new)]
        self.e[bank] = e[: len(new)]
        self.z[bank] = 0
        if self.init_scale > 0:
            for b, lane in new:
                self.z[lane.bank] = m.initial_state(self.z[lane.bank][None], self.init_scale,
                                                    self.req[b].generator)[0]

    def warm_shapes(self, shortest: int, longest: int) -> None:
        """Run now (:func:`recdiff.samplers.warm_up`, where the engine replays a graph per shape) every cycle shape a
        call can meet: how many lanes live depends on how often the readouts guess right, which no example prompt
        fixes, so each power-of-two count of rows up to every slot's lanes, with each key count from the shortest
        prompt to the rows' end (side places included). Run with every slot free: padding rows only, which write the
        junk place of cache row 0 and the padding bank, both written before any lane reads them. ``longest``: unused,
        the rows' end bounds the key counts."""
        run = self.runner
        most = self.slots * self.lanes_per_seq
        for keys in sorted({run.keys(x) for x in range(shortest + 1, run.length + 1)}):
            for width in sorted({run.width(n, most) for n in range(1, most + 1)}):
                rows = self._rows([], width, keys, keys - 1)
                where = rows["pos"], rows["slot"], rows["visible"], rows["rows"]
                run.step(Step(_lane_embed, (keys,)), rows["ids"], *where)
                z = run.step(Step(_lane_cores, (self.schedule.K, keys)), self.z[rows["bank"]],
                                self.e[rows["bank"]], *where, rows["stage"])
                zeros = torch.zeros(width, dtype=torch.long, device=run.device)
                run.step(Step(_lane_decode, (keys,)), z[zeros], *where, zeros)

    # ------------------------------------------------------------------------------------------ decisions
    def _decide(self, out: list[tuple[int, int, Lane]], logits: Tensor) -> None:
        """The readouts' proposals and commits, sequence by sequence, lanes in the order they started (each
        sequence's draws in an order of its own)."""
        sch, select = self.schedule, self.opts.select
        if select.greedy:
            tokens = logits.argmax(-1).tolist()  # the cycle's one read-back
            probs = None
        else:
            tokens, probs = [None] * len(out), select.probs(logits)
        finals = []
        for j, (_, b, lane) in enumerate(out):
            req, end = self.req[b], lane.stage + sch.K - 1
            if end == sch.S - 1:
                finals.append((j, b, lane))
                continue
            gen = req.generator
            if end == sch.K - 1:  # q1: the first proposal
                if probs is None:
                    lane.first = tokens[j]
                else:
                    lane.q1 = probs[j]
                    lane.first = rejection.draw(lane.q1, gen)
                self._child(req, lane, lane.first, end)
            elif req.record.tree.has_place(lane.index + 1):  # q2: a second proposal where it differs from the first
                if probs is None:
                    if tokens[j] != lane.first:
                        lane.second = tokens[j]
                else:
                    lane.r2 = rejection.second_proposal(lane.q1, probs[j], lane.first)
                    if lane.r2 is not None:
                        lane.second = rejection.draw(lane.r2, gen)
                if lane.second is not None:
                    self._child(req, lane, lane.second, end)
        for j, b, lane in finals:
            self._final(self.req[b], lane, tokens[j], None if probs is None else probs[j])

    def _child(self, req: Request, lane: Lane, token: int, origin: int) -> None:
        """A lane from a proposal, within the length limit and where a place is free (else the token, if it is
        committed, starts a fresh lane then)."""
        if lane.index + 1 < req.max_new_tokens and req.record.tree.has_place(lane.index + 1):
            self._start(req, lane.index + 1, token, lane, origin)

    def _final(self, req: Request, lane: Lane, token: int | None, p: Tensor | None) -> None:
        sch, d = self.schedule, req.record
        if p is None:  # greedy: the full-depth token; which proposal (if any) it was
            which = 1 if token == lane.first else 2 if lane.second is not None and token == lane.second else 0
        elif lane.first is None:
            token, which = rejection.draw(p, req.generator), 0
        else:
            token, which = rejection.verify(p, lane.q1, lane.first, lane.r2, lane.second, req.generator)
        if lane.first is not None:
            d.q1[0] += 1
            d.q1[1] += which == 1
        if lane.second is not None and which != 1:
            d.q2[0] += 1
            d.q2[1] += which == 2
        d.accepted.append(which)
        accepted = {1: sch.K - 1, 2: None if sch.K2 is None else sch.K2 - 1}.get(which)
        tree: Tree = d.tree
        kept, dropped, move = tree.commit(lane, token, accepted)
        self._release(dropped)
        if move is not None:
            self.runner.cache.move(d.slot, *move)
        if self._stops(req):
            self._release(tree.drop_all())
        elif kept is None:
            self._start(req, lane.index + 1, token, None, sch.S - 1)

    # ------------------------------------------------------------------------------------------ results
    def finish(self, slot: int) -> GenerationResult:
        req, self.req[slot] = self.req[slot], None
        d = req.record
        self._release(d.tree.drop_all())
        tokens = d.tree.tokens
        decoded = max(len(tokens) - 1, 1)
        stats = {
            "core_passes": d.core_passes,
            "tokens_forward": d.tokens_forward,
            "steps": d.cycles,
            "new_tokens": len(tokens),
            "q1_acceptance": d.q1[1] / d.q1[0] if d.q1[0] else None,
            "q2_acceptance": d.q2[1] / d.q2[0] if d.q2[0] else None,
            # recurrences a token waited for after the first (the prefill's): K per cycle
            "sequential_per_token": d.cycles * self.schedule.K / decoded,
            "peak_lanes": d.peak_lanes,
            "accepted": d.accepted,  # per committed token after the first: 1 q1, 2 q2, 0 neither
            "kv_cache_bytes": self.runner.cache.bytes_per_slot(*self.kv_shape),
        }
        return GenerationResult(tokens=tokens, stats=stats, stopped_by=d.stopped_by)


make_batch = LoopSpecBatch


# the cycle's model calls as steps (recdiff.engine.step): the keys they attend to (their graphs' shapes) and the
# recurrences of a cycle are their constants
def _lane_embed(c: tuple[int], run: Runner, *args: Tensor) -> Tensor:
    return run.lane_embed(*args)


def _lane_cores(c: tuple[int, int], run: Runner, z: Tensor, e: Tensor, *args: Tensor) -> Tensor:
    *where, stage = args
    return run.lane_cores(z, e, *where, stage, c[0])


def _lane_decode(c: tuple[int], run: Runner, *args: Tensor) -> Tensor:
    return run.lane_decode(*args)
