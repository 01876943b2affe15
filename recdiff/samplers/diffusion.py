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

``adaptive_rule="reference"`` follows the authors' rule, token for token (the fixtures, published runs): there a
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
momentum, noise, stability, growth, δ and the freeze point — is a tensor operation over all slots
(:mod:`recdiff.samplers.diffusion_step`, pure functions of the batch state), and a step reads back once: each
slot's shift and, with stop ids or strings, the tokens its states predict. From that read the host keeps, per
sequence, the pointers the next step hands in and the scheduler needs (the wavefront's start and width: the
next step's shapes, admissions and retirements), the stop checks and the counts its result reports
(:class:`~recdiff.samplers.diffusion_host.SlotRecord`). Random draws (α = ``init_scale`` > 0, random headway ids,
sampled proposals) are made on the host between steps, from each sequence's own stream.
"""

from __future__ import annotations

import torch
from torch import Tensor

from recdiff.engine import Request, Runner, Step, cache_length, get_runner
from recdiff.errors import RecdiffError
from recdiff.params import DiffusionParams
from recdiff.samplers.base import GenerationResult, Options, check_fits
from recdiff.samplers.diffusion_host import SlotRecord
from recdiff.samplers.diffusion_step import PTR, Rule, advance, beta_per_position, noised, state_names
from recdiff.trace import TraceRecorder

__all__ = ["make_batch", "DiffusionBatch", "beta_per_position"]


def make_batch(opts: Options, p: DiffusionParams) -> DiffusionBatch:
    if p.pad_id is not None and p.pad_id >= opts.model.config.vocab_size:
        raise RecdiffError(f"diffusion sampler: pad_id={p.pad_id} is outside the vocabulary "
                           f"(size {opts.model.config.vocab_size})")
    return DiffusionBatch(opts, p)


class DiffusionBatch:
    def __init__(self, opts: Options, p: DiffusionParams) -> None:
        m = opts.model
        self.opts, self.p, self.m, self.slots = opts, p, m, opts.slots
        self.r, self.r_inner, self.headway, self.wavefront = p.r, p.r_inner, p.headway, p.wavefront
        self.init_scale = p.init_scale
        self.rule = rule = Rule(p, greedy=opts.select.greedy, tokens=bool(opts.stop.ids or opts.stop.strings))
        self.window = self.wavefront + self.headway  # window rows: the widest wavefront plus one step's growth
        # padded wavefront rows reach up to `window` positions past the furthest front
        self.kv_shape = (cache_length(m, self.window + 1), 1)  # what this call asks of the cache (its stats)
        self.runner = run = get_runner(m, opts.slots, self.kv_shape[0], "shared")
        B, S, E, V, dev = self.slots, run.length, m.config.state_width, m.config.padded_vocab_size, run.device
        self.E, self.dev = E, dev
        self.names = state_names(rule)
        self._traced = 0  # live sequences recording a trace (advance returns δ only while one does)
        # advance's dimensions that are constants of this batch (slots, cache length, model width, vocabulary; the
        # pointers' shape): compiled as fixed sizes. Its arguments: the state, the model call's z, logits (and e),
        # ptr, the grown window's rows, the extras (sampled proposals, new states' noise)
        per_name = {"seq": (0, 1), "unchanged": (0, 1), "z": (0, 1, 2), "e": (0, 1, 2), "age": (0, 1)}
        self._advance_static = (*(per_name[k] for k in self.names), (0, 2), (0, 2), *([(0, 2)] if p.eta > 0 else []),
                                (0, 1, 2), (0,), *([] if rule.greedy else [(0,)]), *([(0, 2)] if rule.noise else []))
        # draws between steps: fresh, noise or new states (α > 0), random ids for headway extras
        self.draws = self.init_scale > 0 or (self.headway > 1 and p.pad_id is None)
        # the device state (diffusion_step.state_names): the runner's buffers, zeroed (its graphs read and write them
        # where they are, and outlive this batch)
        self.seq = run.buffer("diffusion-seq", (B, S), torch.long)
        self.unchanged = run.buffer("diffusion-unchanged", (B, S), torch.long)
        self.z = run.buffer("diffusion-z", (B, self.window, E), run.dtype)
        self.e = run.buffer("diffusion-e", (B, self.window, m.config.n_embd), run.dtype) if p.eta > 0 else None
        self.age = run.buffer("diffusion-age", (B, self.window), torch.long) if rule.ages else None
        # the state advance writes, in order (the same tensors for the batch's whole life)
        self._state = tuple(getattr(self, k) for k in self.names)
        # what a step's model call takes of the window: the states, the momentum term (η > 0), the ages (β > 0)
        self._model_window = (self.z, *([self.e] if p.eta > 0 else []), *([self.age] if p.beta > 0 else []))
        # the model call's outputs: z and logits (in the model's dtype, half a float32 set's memory) and e (η > 0)
        self._output_shapes = (((B, self.window, E), run.dtype), ((B, self.window, V), run.dtype),
                               *([((B, self.window, m.config.n_embd), run.dtype)] if p.eta > 0 else []))
        run.outputs("diffusion", self._output_shapes, self.window)  # allocated now (under graphs), not mid-run
        self.req: list[Request | None] = [None] * B
        self.host: list[SlotRecord | None] = [None] * B
        self.rows = torch.arange(self.window + 1, device=dev)
        self._grown_rows: dict[int, Tensor] = {}  # T → advance's rows_g (0 … Tg-1)
        self._steps: dict[int, Step] = {}  # keys → the model step
        self._advance_steps = {traced: Step(advance, (rule, traced)) for traced in (False, True)}

    def check(self, index: int | None, prompt_len: int, max_new_tokens: int) -> None:
        check_fits(self.m, prompt_len, prompt_len + max_new_tokens + 1, index)

    # ------------------------------------------------------------------------------------------ prefill
    def admit(self, entries: list[tuple[int, Request]]) -> None:
        m, p, reqs = self.m, self.p, [q for _, q in entries]
        # the prompts at r recurrences in one parallel pass; their last logits give the first new tokens
        logits, z_last = self.runner.prefill([q.prompt for q in reqs], [b for b, _ in entries], self.r,
                                             self.init_scale, [q.generator for q in reqs])
        firsts = [int(self.opts.select(logits[i : i + 1], q.generator)[0]) for i, q in enumerate(reqs)]
        e_first = None
        if p.eta > 0:  # momentum buffer: P of each sequence so far (no cache); only its last row is ever used
            T = max(len(q.prompt) for q in reqs) + 1
            ids = torch.tensor([q.prompt + [f] + [0] * (T - 1 - len(q.prompt)) for q, f in zip(reqs, firsts)],
                               device=self.dev)
            at = torch.tensor([len(q.prompt) for q in reqs], device=self.dev)
            e_first = m.embed(ids)[torch.arange(len(reqs), device=self.dev), at]
        for i, (slot, req) in enumerate(entries):
            self._admit(slot, req, firsts[i], z_last[i : i + 1], None if e_first is None else e_first[i])

    def _admit(self, b: int, req: Request, first: int, z_last: Tensor, e_first: Tensor | None) -> None:
        p, L = self.p, len(req.prompt)
        self.seq[b, : L + 1] = torch.tensor(req.prompt + [first], device=self.dev)
        self.unchanged[b] = 0
        # the state for position L, which predicts token L+1 (the rows after it are padding until grown into)
        self.z[b, 0] = self.m.initial_state(z_last, self.init_scale, req.generator)[0, 0]
        if self.e is not None:  # the momentum term η·e of the first token's embedding
            self.e[b, 0] = self.p.eta * e_first
        if self.age is not None:
            self.age[b, 0] = 0
        max_steps = p.max_steps or 4 * req.max_new_tokens * -(-self.r // self.r_inner)
        # the front may run up to `wavefront` positions ahead of the last frozen token
        rec = SlotRecord(L=L, max_new=req.max_new_tokens, max_steps=max_steps,
                         max_len=min(self.m.config.block_size, L + req.max_new_tokens + self.window + 1),
                         n_frozen=L + 1, seq_end=L + 1, frozen_at=[0],
                         # done: the prefill's token is all that was asked
                         tokens=[first], done=req.max_new_tokens <= 1)
        rec.recorder = TraceRecorder(L) if req.trace else None
        self._traced += rec.recorder is not None
        self.req[b], self.host[b] = req, rec

    # ------------------------------------------------------------------------------------------ one step
    def step(self) -> list[int]:
        live = [b for b, rec in enumerate(self.host) if rec is not None and not rec.done]
        if live:
            self._step(live)
        return [b for b, rec in enumerate(self.host) if rec is not None and rec.done]

    def _step(self, live: list[int]) -> None:
        run, rule, host = self.runner, self.rule, self.host
        B = self.slots
        # per slot: the wavefront's start, its states W, the states it grows by, the previous shift (a slot without a
        # live sequence: no rows)
        start, widths, growth, lag = [0] * B, [0] * B, [0] * B, [0] * B
        for b in live:  # growth: the headway, unless the wavefront (or the block) is full
            rec = host[b]
            s, W = rec.n_frozen - 1, rec.W
            start[b], widths[b], lag[b] = s, W, rec.lag
            growth[b] = max(0, min(self.wavefront - W, self.headway, rec.max_len - s - W))
        T = run.width(max(widths), self.window)  # a few static shapes under CUDA graphs
        Tg = min(self.window, T + self.headway)
        # the furthest query: the last padded row of the slot whose wavefront starts furthest (a free slot's is 0)
        keys = run.keys(max(start) + T)
        mix, grow_noise = self._draws(live, widths, growth, T) if self.draws else ([], [])
        ptr = run.ints("diffusion-ptr", start + widths + growth + lag, (len(PTR), B, 1))
        z, e, logits = self._model_step(T, keys, ptr, mix)
        extra = ([] if rule.greedy else [self._select(logits, live, widths)]) + grow_noise
        out = self._advance(T, Tg, ptr, z, e, logits, extra)  # the state, written in place
        read = out[0].tolist()  # the step's one read-back
        delta = out[1] if rule.adaptive and self._traced else None
        stop = self.opts.stop.first_stop
        for b in live:
            rec, row = host[b], read[b]
            shift, before, lag = row[0], rec.n_frozen, rec.lag
            rec.advanced(shift, widths[b], growth[b])
            if rec.recorder is not None:
                compared = widths[b] - lag if rule.reference else widths[b]
                self._record(b, rec.recorder, None if delta is None else delta[b, : max(compared, 0)], before - 1)
            if shift and rule.tokens:  # the newly frozen tokens against the stops
                rec.tokens += row[1 : 1 + shift]
                stopped = stop(rec.tokens, before - rec.L)
                if stopped:
                    rec.stopped_by, rec.done = stopped[1], True
            if rec.done:
                continue
            if rec.n_frozen - rec.L >= rec.max_new:
                rec.done = True
            elif rec.steps >= rec.max_steps:
                rec.stopped_by, rec.done, rec.hit_cap = "max_steps", True, True

    def _noise(self, shape_rows: list[int], live: list[int], width: int = 1) -> Tensor:
        """Initial states for ``shape_rows[b]`` rows of each live slot, from its own stream (zeros at α = 0), in
        ``(slots, rows, E)`` with at least ``width`` rows (zeros past a slot's own)."""
        out = torch.zeros((self.slots, max(shape_rows + [width]), self.E), device=self.dev, dtype=self.z.dtype)
        if self.init_scale > 0:
            for b in live:
                n = shape_rows[b]
                if n:
                    out[b, :n] = self.m.initial_state(out[b : b + 1, :n], self.init_scale, self.req[b].generator)[0]
        return out

    def _draws(self, live: list[int], widths: list[int], growth: list[int], T: int
               ) -> tuple[list[Tensor], list[Tensor]]:
        """Every random draw of this step, from each sequence's own stream in the algorithm's order: a fresh state
        for a wavefront that froze whole in the previous step, noise for β over each slot's ``widths`` states,
        random ids for extra headway positions (written into ``seq`` here: they lie past the wavefront, so the model
        call does not read them), noise for the ``growth`` new states. Nothing is drawn at α = 0 but the random
        ids."""
        if self.init_scale > 0:
            redo = [b for b in live if self.host[b].empty]
            if redo:
                fresh = self._noise([1 if b in redo else 0 for b in range(self.slots)], redo)
                for b in redo:
                    self.z[b, 0] = fresh[b, 0]
        # noise for β over the step's T rows (under CUDA graphs T is a power of two above the widest wavefront)
        mix = [self._noise(widths, live, T)[:, :T]] if self.p.beta > 0 and self.init_scale > 0 else []
        if self.headway > 1 and self.p.pad_id is None:
            for b in live:
                if growth[b] > 1:
                    at = self.host[b].n_frozen - 1 + widths[b] + 1  # after the first new position
                    self.seq[b, at : at + growth[b] - 1] = torch.randint(
                        0, self.m.config.vocab_size, (growth[b] - 1,), device=self.dev, generator=self.req[b].generator)
        grow_noise = []
        if self.init_scale > 0:
            if self.p.continuous_compute:  # random only where the wavefront is shorter than the growth
                grow_noise = [self._noise([g if W < g else 0 for W, g in zip(widths, growth)], live)]
            else:
                grow_noise = [self._noise(growth, live)]
        return mix, grow_noise

    def _model_step(self, T: int, keys: int, ptr: Tensor, mix: list[Tensor]) -> tuple[Tensor, Tensor | None, Tensor]:
        """1.-4. of a step over ``T`` window rows attending to ``keys`` positions (:func:`model_step`) → states,
        embeddings (η > 0), logits."""
        run = self.runner
        rows = run.row_grid(T)  # the runner's: a graph that reads it outlives this batch
        outs = run.outputs("diffusion", self._output_shapes, T)
        st = self._steps.get(keys)
        if st is None:  # made once per key count: a step's key walks every parameter
            st = self._steps[keys] = Step(model_step, (self.rule, keys))
        z, logits, *e = run.step(st, rows, self.seq, ptr,
                                    *run.leading(self._model_window, T), *mix, fixed=2, into=outs)
        return z, e[0] if e else None, logits

    def _advance(self, T: int, Tg: int, ptr: Tensor, z: Tensor, e: Tensor | None, logits: Tensor,
                 extra: list[Tensor]) -> tuple[Tensor, ...]:
        """5.-6. of a step (:func:`recdiff.samplers.diffusion_step.advance`): writes the batch state (and, under
        graphs, reads the model call's outputs) where they are, and returns the read-back (with δ while a sequence is
        traced). Its specialisation is known here (compiled widths are at least 2; the new states' noise may have one
        row): handed to the engine with the dimensions that are the batch's constants."""
        rows_g = self._grown_rows.get(T)
        if rows_g is None:
            rows_g = self._grown_rows[T] = self.rows[:Tg][None]  # a dense view, once per width
        outs = (z, logits, *([e] if e is not None else []))
        sig = (extra[-1].shape[1] == 1,) if self.rule.noise else ()
        return self.runner.step(self._advance_steps[self._traced > 0], *self._state, *outs, ptr, rows_g,
                                   *extra, model=False, fixed=len(self._state) + len(outs), sig=sig,
                                   static=self._advance_static)

    def warm_shapes(self, shortest: int, longest: int) -> None:
        """Run now (:func:`recdiff.samplers.warm_up`, where the engine replays a graph per shape) every step shape
        that sequences of ``shortest`` to ``longest`` positions (prompt and new tokens) can meet: each power-of-two
        wavefront width up to the window (how wide a wavefront grows depends on how fast it converges, which no
        example prompt fixes), with each key count its front can reach, and each width of new states' noise. Run
        with every slot free (``W`` = 0): the batch's tokens and counts are rewritten with themselves, its window rows
        with zeros (a free slot's rows are written before they are read); K/V rows written at positions of free slots
        are rewritten before any query reads them, as in every step."""
        run, rule = self.runner, self.rule
        ptr = torch.zeros((len(PTR), self.slots, 1), dtype=torch.long, device=self.dev)
        noise = lambda rows: torch.zeros((self.slots, rows, self.E), device=self.dev, dtype=self.z.dtype)  # noqa: E731
        for T in sorted({run.width(n, self.window) for n in range(1, self.window + 1)}):
            mix = [noise(T)] if self.p.beta > 0 and rule.noise else []
            for keys in sorted({run.keys(x) for x in range(shortest + T - 1, longest + T)}):
                z, e, logits = self._model_step(T, keys, ptr, mix)
            extra = [] if rule.greedy else [torch.zeros((self.slots, T), dtype=torch.long, device=self.dev)]
            for new_rows in range(1, self.headway + 1) if rule.noise else [None]:
                self._advance(T, min(self.window, T + self.headway), ptr, z, e, logits,
                              extra + ([] if new_rows is None else [noise(new_rows)]))

    def _select(self, logits: Tensor, live: list[int], widths: list[int]) -> Tensor:
        """Sampled proposals ``(B, T)`` for each slot's ``widths`` states, each sequence from its own stream (greedy
        proposals are an argmax inside :func:`advance`)."""
        new = torch.zeros(logits.shape[:2], dtype=torch.long, device=self.dev)
        for b in live:
            new[b, : widths[b]] = self.opts.select(logits[b, : widths[b]], self.req[b].generator)
        return new

    def _record(self, b: int, recorder: TraceRecorder, delta: Tensor | None, start: int) -> None:
        """One trace row of slot ``b`` (only for sequences asked to be traced: host copies are fine here); δ over its
        compared rows under adaptive freezing, the first at the step's ``start``."""
        rec = self.host[b]
        end = rec.seq_end
        recorder.record(self.seq[b, :end].cpu().numpy(), rec.n_frozen, rec.counter(end, self.r, self.r_inner),
                        rec.stability(self.unchanged[b, :end].cpu().numpy()),
                        None if delta is None else delta.float().cpu().numpy(), start)

    # ------------------------------------------------------------------------------------------ result
    def finish(self, slot: int) -> GenerationResult:
        req, rec, self.req[slot], self.host[slot] = self.req[slot], self.host[slot], None, None
        self._traced -= rec.recorder is not None
        b, L = slot, rec.L
        end = max(rec.n_frozen, rec.seq_end) if rec.hit_cap else rec.n_frozen
        # at the step cap, the unfrozen proposals are still the model's best guess: return them, flagged
        tokens = self.seq[b, L:end].tolist()
        if rec.stopped_by in ("stop_token", "stop_string"):
            tokens = tokens[: self.opts.stop.first_stop(tokens, 0)[0]]  # several tokens may freeze in the stopping step
        tokens = tokens[: req.max_new_tokens]
        n_out = L + len(tokens)
        frozen_at = rec.frozen_at[: n_out - L]
        stats = {
            "core_passes": self.r + self.r_inner * rec.steps,
            "tokens_forward": self.r * L + self.r_inner * sum(W for _, W, _ in rec.spans),
            "steps": rec.steps,
            "standing_waves": sum(g < self.headway for _, _, g in rec.spans),  # steps without growth
            "new_tokens": len(tokens),
            "recurrences_per_position": rec.counter(n_out, self.r, self.r_inner).tolist(),
            "stability_per_position": rec.stability(self.unchanged[b, :n_out].cpu().numpy()).tolist(),
            # the step (0 = prefill) at which each new token froze; -1: not frozen (at the step cap)
            "frozen_at_step": frozen_at + [-1] * (n_out - L - len(frozen_at)),
            "max_steps_reached": rec.hit_cap,
            "unfrozen_tokens": max(0, n_out - rec.n_frozen),
            "kv_cache_bytes": self.runner.cache.bytes_per_slot(*self.kv_shape),
            "ideal_speedup": (self.r + 1) / (self.r_inner + 1),
        }
        recorder = rec.recorder
        return GenerationResult(tokens=tokens, stats=stats, trace=recorder.finish() if recorder else None,
                                stopped_by=rec.stopped_by)


def model_step(c: tuple[Rule, int], run: Runner, rows: Tensor, seq: Tensor, ptr: Tensor, z: Tensor, *rest: Tensor
               ) -> tuple[Tensor, ...]:
    """The model's part of a sampler step (``c``: the rule and the keys attended to): noise, P with momentum, r'
    recurrences, C over the window rows ``rows`` (B, T) of every slot, from the token ids ``seq`` and pointers
    ``ptr``, the step's rows of the window's states ``z``, momentum term (η > 0) and ages (β > 0), then the noise
    (α > 0). Returns the states, the logits in the model's dtype (which converts to float32 exactly) and, with η > 0,
    the embeddings."""
    rule, keys = c
    eta = rule.p.eta
    e_prev, rest = (rest[0], rest[1:]) if eta > 0 else (None, rest)
    # the noise: a few operations, eagerly also on the compile path (a program's call costs more than they do)
    if rule.p.beta > 0:
        z = noised(rule, (z, *rest))
    # e ← η·e_prev + (1 − η)·P(y) (the window holds η·e_prev), inside P's call
    e, pos = run.embed_window(rows, seq, ptr, keys, None if e_prev is None else (eta, e_prev))
    z = run.cores(z, e, pos, keys, rule.p.r_inner)
    return z, run.decode(z, pos, keys, float32=False), *([e] if eta > 0 else [])
