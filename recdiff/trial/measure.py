"""Measuring one trial: a :class:`~recdiff.schema.TrialSpec` over a workload → measurements (knows nothing of Optuna).

Two passes, each after untimed warm-ups (allocations, compilation, graph capture):

- accuracy (:func:`accuracy_pass`): every problem of the slice, ``run.batch_size`` sequences side by side
  (continuous batching); also ``throughput_tokens_per_s``;
- speed (:func:`speed_pass`): the paired timing (:func:`recdiff.timing.paired_timing`): the first
  ``run.speed_samples`` problems, each decoded alone (batch 1) by the trial's sampler and by the study's reference
  (``run.reference``), alternately, in ``run.repeats`` rounds, on ``run.timing_threads`` threads, the device
  synchronised around each call: ``tokens_per_s`` (the paper's metric, the median over problems × rounds) and the
  paired ``speedup``, each with its 95% interval. The reference's own trial is timed against itself (speed-up 1).
  With ``run.timing_batch`` B > 1 each timed call is ``B`` problems decoded side by side (:func:`side_by_side`), and
  both numbers are a batch's throughput: generated tokens per second of the whole call.

Then the per-sample table, traces and scores (:mod:`recdiff.trial.samples`) and the user attributes, a
:class:`~recdiff.trial.record.TrialRecord` (accuracy with its 95% Wilson interval, core passes per token, peak memory
...; a LoopSpec trial's readouts: :mod:`recdiff.trial.readouts`).

Failures are exceptions for the caller to record: :class:`~recdiff.errors.RecdiffError` = an invalid combination of
settings, :class:`~recdiff.trial.deadline.TrialTimeout`, ``torch.OutOfMemoryError``/``MemoryError``, anything else.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from recdiff.errors import RecdiffError
from recdiff.timing import PairedTiming, PeakMemory, ReferenceTimingError, Sample, Timer, paired_timing, torch_threads
from recdiff.tokenizer import ByteCodec, encode_prompt
from recdiff.trial.deadline import deadline
from recdiff.trial.readouts import readout_attrs
from recdiff.trial.record import TrialRecord
from recdiff.trial.samples import record_samples

if TYPE_CHECKING:
    from recdiff.schema import RunConfig, TrialSpec
    from recdiff.trial.workload import Workload

Tick = Callable[[int], None]   # progress: n samples done (also checks the deadline)


@dataclass
class TrialResult:
    accuracy: float
    tokens_per_s: float
    attrs: dict[str, Any]                 # user attributes: a TrialRecord's (recdiff/trial/record.py)
    rows: list[dict[str, Any]] = field(default_factory=list)
    picture: str | None = None            # for the dashboard: the first trace drawn, or LoopSpec's readouts


@dataclass
class Prompts:
    texts: list[str]                      # as the benchmark renders them
    ids: list[list[int]]
    limits: list[int]                     # new tokens allowed per prompt


@dataclass
class BatchPass:
    results: list[Any]                    # one GenerationResult per problem
    seconds: float                        # wall-clock of the whole batched pass


def encode_prompts(work: Workload, max_new_tokens: int, codec: Any) -> Prompts:
    """The rendered prompts, their ids and their limits: a model's context bounds the answer, so
    ``run.max_new_tokens`` is an upper limit, not a demand (as is the benchmark's own cap)."""
    texts = [work.benchmark.render(p, work.model.tokenizer) for p in work.problems]
    ids = [encode_prompt(codec, t) for t in texts]
    block = int(work.model.config.block_size)
    limits = []
    for problem, prompt in zip(work.problems, ids):
        room = block - len(prompt) - 1
        if room < 1:
            raise RecdiffError(f"problem {problem.id}: prompt of {len(prompt)} tokens does not fit the model's "
                               f"block_size {block}")
        limits.append(min(room, max_new_tokens, work.benchmark.max_new_tokens(problem) or room))
    return Prompts(texts, ids, limits)


def shared_settings(work: Workload, run: RunConfig) -> tuple[dict[str, Any], Any]:
    """The generation settings every call of a trial shares, its sampler's aside, and the codec of its prompts."""
    tok = work.model.tokenizer
    codec = tok if tok is not None else ByteCodec()
    eos = getattr(codec, "eos_token_id", None)
    base = dict(max_new_tokens=run.max_new_tokens, seed=run.seed, temperature=run.temperature, top_p=run.top_p,
                stop_token_ids=[eos] if eos is not None else None,
                stop_strings=list(work.benchmark.stop_strings or []) if tok is not None else None)  # bytes: cut later
    return base, codec


def _warm(gen: dict[str, Any], limits: list[int]) -> dict[str, Any]:
    """Warm-up settings: a short answer that fits every prompt of the pass."""
    return {**gen, "max_new_tokens": min([8, *limits])}


def accuracy_pass(work: Workload, gen: dict[str, Any], prompts: Prompts, run: RunConfig, batch_size: int,
                  n_traces: int, tick: Tick) -> BatchPass:
    """Every problem, ``batch_size`` sequences side by side; the first ``n_traces`` keep their diffusion trace."""
    import recdiff

    for _ in range(run.warmup):
        recdiff.warm_up(work.model, prompts.ids, batch_size=batch_size, **_warm(gen, prompts.limits))
    with Timer(work.device) as t:
        results = recdiff.generate(work.model, prompts.ids, **{**gen, "max_new_tokens": prompts.limits},
                                   trace=[i < n_traces for i in range(len(prompts.ids))], batch_size=batch_size,
                                   progress=tick)
    return BatchPass(results, t.seconds)


def alone(work: Workload, gen: dict[str, Any], prompts: Prompts) -> Sample:
    """Timed prompt ``i`` decoded alone (batch 1) with the settings ``gen``; its count of new tokens."""
    import recdiff

    def sample(i: int) -> int:
        res = recdiff.generate(work.model, prompts.ids[i], **{**gen, "max_new_tokens": prompts.limits[i]})
        return int(res.stats.get("new_tokens", len(res.tokens)))
    return sample


def side_by_side(work: Workload, gen: dict[str, Any], prompts: Prompts, batch: int) -> Sample:
    """Timed call ``i``: ``batch`` problems from problem ``i·batch`` on (wrapping around the slice, so that every call
    is a full batch) decoded side by side; the new tokens of all of them."""
    import recdiff

    n = len(prompts.ids)

    def sample(i: int) -> int:
        rows = [(i * batch + j) % n for j in range(batch)]
        res = recdiff.generate(work.model, [prompts.ids[k] for k in rows], batch_size=batch,
                               **{**gen, "max_new_tokens": [prompts.limits[k] for k in rows]})
        return sum(int(r.stats.get("new_tokens", len(r.tokens))) for r in res)
    return sample


def reference_gen(trial: TrialSpec, base: dict[str, Any]) -> dict[str, Any] | None:
    """The generation settings of the study's reference (``run.reference``); None when the trial's sampler is the
    reference itself (it is then timed against itself)."""
    ref = trial.run.reference_sampler()
    return None if trial.sampler == ref else {**base, "sampler": ref.name, **ref.params()}


def speed_pass(work: Workload, run: RunConfig, gen: dict[str, Any], ref_gen: dict[str, Any] | None,
               prompts: Prompts, n: int, tick: Tick) -> PairedTiming:
    """``n`` timed calls, each the next problem alone (batch 1), or with ``run.timing_batch`` B > 1 the next B
    problems side by side: the trial's sampler (``gen``) and the reference (``ref_gen``; None: the trial is the
    reference) alternately in ``run.repeats`` rounds, after untimed warm-ups (compilation, then ``run.warmup`` calls of
    each). A reference that fails raises ReferenceTimingError: the trial is FAIL."""
    import recdiff

    batch = run.timing_batch
    warm = prompts.ids[:n * batch]
    with torch_threads(run.timing_threads):   # warmed on the threads it is timed on
        for _ in range(run.warmup):
            recdiff.warm_up(work.model, warm, batch_size=batch, **_warm(gen, prompts.limits[:len(warm)]))
            if ref_gen is not None:
                try:
                    recdiff.warm_up(work.model, warm, batch_size=batch, **_warm(ref_gen, prompts.limits[:len(warm)]))
                except RecdiffError as exc:   # the reference's settings, not the trial's: FAIL, not PRUNED
                    raise ReferenceTimingError(f"reference measurement failed: {exc}") from exc

    def timed(settings: dict[str, Any]) -> Sample:
        return alone(work, settings, prompts) if batch == 1 else side_by_side(work, settings, prompts, batch)

    reference = timed(ref_gen) if ref_gen is not None else None
    return paired_timing(timed(gen), reference, n, rounds=run.repeats, warmup=run.warmup,
                         device=work.device, threads=run.timing_threads, seed=run.seed, progress=lambda: tick(1))


def run_trial(work: Workload, trial: TrialSpec, output_dir: str | os.PathLike) -> TrialResult:
    """Run ``trial.sampler`` over the workload's problems; write samples and traces under ``output_dir``."""
    from tqdm.auto import tqdm

    import recdiff
    from recdiff.benchmarks.stats import wilson_interval

    sampler, run = trial.sampler, trial.run
    reason = sampler.complaint()
    if reason:
        raise RecdiffError(reason)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    params = sampler.params()
    base, codec = shared_settings(work, run)
    gen = {**base, "sampler": sampler.name, **params}
    ref_gen = reference_gen(trial, base)
    prompts = encode_prompts(work, run.max_new_tokens, codec)
    n_traces = run.n_traces if sampler.name == "diffusion" else 0
    batch_size = run.batch_size or recdiff.default_batch_size(work.model.device)
    # batch 1: distinct problems, each timed alone; batches wrap around the slice, so that each call is a full batch
    n_speed = min(run.speed_samples, len(prompts.ids)) if run.timing_batch == 1 else run.speed_samples

    shown = ("r", "r_inner", "beta", "epsilon")
    label = f"{sampler.name} " + " ".join(f"{k}={v}" for k, v in params.items() if k in shown)
    timed_calls = 2 * run.repeats * n_speed   # each round: the sampler, then the reference, on every timed problem
    bar = tqdm(total=len(prompts.ids) + timed_calls, desc=label, file=sys.stderr, disable=not run.progress, leave=False,
               dynamic_ncols=True)
    with deadline(run.timeout_s) as check_time, PeakMemory(work.device) as mem, bar:
        def tick(n: int) -> None:
            bar.update(n)
            check_time()

        batch = accuracy_pass(work, gen, prompts, run, batch_size, n_traces, tick)
        speed = speed_pass(work, run, gen, ref_gen, prompts, n_speed, tick)

    call_seconds = speed.prompt_seconds()
    alone_s = call_seconds.tolist() if run.timing_batch == 1 else []   # the per-sample table's times: batch 1 only
    samples = record_samples(work, prompts.texts, batch.results, alone_s, speed.tokens[0].tolist()[:len(alone_s)],
                             codec, out)
    rows = samples.rows
    k, n = sum(r["correct"] for r in rows), len(rows)
    low, high = wilson_interval(k, n)
    total_tokens = sum(r["new_tokens"] for r in rows)
    kv = [s["kv_cache_bytes"] for s in samples.stats if s.get("kv_cache_bytes") is not None]
    if not kv and callable(getattr(work.model, "kv_cache_bytes", None)):
        kv = [work.model.kv_cache_bytes()]
    record = TrialRecord(
        accuracy_lo=float(low), accuracy_hi=float(high), n_samples=n, n_correct=k,
        # generated tokens per wall-clock second over the whole slice at batch_size: a throughput, not tokens_per_s
        throughput_tokens_per_s=total_tokens / batch.seconds if batch.seconds > 0 else 0.0,
        batch_size=batch_size, speed_samples=n_speed, compiled=bool(work.model.engine_options.get("compile")),
        core_passes_per_token=sum(r["core_passes"] for r in rows) / total_tokens if total_tokens else 0.0,
        peak_memory_bytes=int(mem.bytes), kv_cache_bytes=int(max(kv)) if kv else None,
        kv_bytes_per_token=max((s["kv_cache_bytes"] / (len(p) + r["new_tokens"]) for s, p, r in
                                zip(samples.stats, prompts.ids, rows) if s.get("kv_cache_bytes") is not None),
                               default=None),
        mean_new_tokens=total_tokens / n if n else 0.0,
        time_per_sample_s=float(call_seconds.sum()) / n_speed / run.timing_batch, timing_batch=run.timing_batch,
        samples_path=str(samples.path), trace_paths=samples.trace_paths, output_dir=str(out),
        **speed.attrs(),   # the paired timing: tokens/s interval, speed-up against the reference, rounds, threads
        # what explains a LoopSpec trial's speed: how often the early readouts were right
        **(readout_attrs(samples.stats) if sampler.name == "loopspec" else {}),
    )
    attrs = record.attrs(sampler.name)
    return TrialResult(accuracy=float(work.benchmark.accuracy(samples.scores)), tokens_per_s=speed.tokens_per_s,
                       attrs=attrs, rows=rows, picture=samples.picture)
