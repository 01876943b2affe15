"""Device-synchronised timing, the paired timing protocol, and peak memory.

On CUDA a :class:`Timer` records CUDA events around the measured region and synchronises before reading
them (the paper's measurement); on CPU it reads ``time.perf_counter``. :func:`paired_timing` is the one timing
protocol of trials, ``recdiff.bench`` and the paper runner: a sampler and the reference sampler timed on the same
prompts, alternating in rounds in one process, summarised as medians with 95% intervals (:class:`PairedTiming`).
:class:`PeakMemory` reports the peak CUDA allocation, or on CPU the peak resident set size of the process while the
block ran (sampled from ``/proc/self/statm``).
"""

from __future__ import annotations

import os
import resource
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


class Timer:
    """``with Timer(device) as t: ...`` then ``t.seconds``."""

    def __init__(self, device: torch.device | str = "cpu", clock: Callable[[], float] = time.perf_counter) -> None:
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.clock = clock   # CPU only (CUDA reads its events); tests pass a fake one
        self.seconds = float("nan")

    def __enter__(self) -> "Timer":
        if self.cuda:
            torch.cuda.synchronize(self.device)
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._t0 = self.clock()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.cuda:
            self._end.record()
            torch.cuda.synchronize(self.device)
            self.seconds = self._start.elapsed_time(self._end) / 1000.0
        else:
            self.seconds = self.clock() - self._t0


def median_tokens_per_s(new_tokens: Iterable[int], seconds: Iterable[float]) -> float:
    """Median over samples of tokens/s per sample (the paper's "t/s"); 0 when there is no sample."""
    rates = [n / s for n, s in zip(new_tokens, seconds) if s > 0]
    return float(statistics.median(rates)) if rates else 0.0


# ------------------------------------------------------------------------------------------- paired timing
Sample = Callable[[int], int]
"""Runs timed prompt ``i`` once (batch 1) and returns how many tokens it generated."""

CONFIDENCE = 0.95
N_RESAMPLES = 9999


class ReferenceTimingError(RuntimeError):
    """The reference sampler could not be timed, so there is no speed-up to record. Deliberately not a
    :class:`~recdiff.errors.RecdiffError`: the study records the trial FAIL (an error of the measurement), not
    PRUNED as an invalid combination of the trial's own settings."""


def median_interval(values: Iterable[float], confidence: float = CONFIDENCE, seed: int = 0,
                    n_resamples: int = N_RESAMPLES) -> tuple[float, float, float]:
    """(median, low, high): the median of ``values`` and its percentile-bootstrap interval (scipy), seeded so the
    same values always give the same interval. ``low <= median <= high`` always holds: with few distinct values the
    percentiles can fall just beside the sample median, and the interval is then widened to include it."""
    from scipy.stats import bootstrap

    x = np.asarray(list(values), dtype=float)
    if x.size < 2 or not np.isfinite(x).all():
        raise ValueError(f"need at least two finite values for an interval, got {x.tolist()}")
    point = float(np.median(x))
    ci = bootstrap((x,), np.median, confidence_level=confidence, n_resamples=n_resamples, method="percentile",
                   vectorized=True, rng=np.random.default_rng(seed)).confidence_interval
    return point, min(float(ci.low), point), max(float(ci.high), point)


def clustered_median_interval(cells: Any, confidence: float = CONFIDENCE, seed: int = 0,
                              n_resamples: int = N_RESAMPLES) -> tuple[float, float, float]:
    """(median, low, high) of ``cells`` ``[clusters][members]`` (timed problems × rounds): the median over all cells
    and its percentile-bootstrap interval resampling whole clusters, each problem with all its rounds (a cluster
    bootstrap): a problem's rounds are not independent draws, so resampling cells would narrow the interval as if
    there were problems × rounds problems. Seeded like :func:`median_interval`; ``low <= median <= high``."""
    from scipy.stats import bootstrap

    x = np.asarray(cells, dtype=float)
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 1 or not np.isfinite(x).all():
        raise ValueError(f"need at least two clusters of finite values, got {x.tolist()}")

    def median_of(index: np.ndarray, axis: int = -1) -> np.ndarray:   # index: (..., clusters) drawn with replacement
        picked = x[np.asarray(index, dtype=int)]                       # (..., clusters, members)
        return np.median(picked.reshape(*picked.shape[:-2], -1), axis=-1)

    point = float(np.median(x))
    ci = bootstrap((np.arange(x.shape[0]),), median_of, confidence_level=confidence, n_resamples=n_resamples,
                   method="percentile", vectorized=True, rng=np.random.default_rng(seed)).confidence_interval
    return point, min(float(ci.low), point), max(float(ci.high), point)


@dataclass(frozen=True)
class PairedTiming:
    """What a trial records from :func:`paired_timing`. Arrays are ``[rounds, prompts]``; ``tokens_per_s`` (the
    study's objective) is the median over prompts × rounds of each timed call's tokens ÷ seconds (the paper's median
    per-sample t/s), ``speedup`` the median over the same cells of the trial's rate ÷ the reference's rate on that
    prompt in that round (paired, so a load that slows both cancels); each with its 95% percentile-bootstrap interval
    over the cells. The reference's own trial has ``speedup`` 1 by definition, its interval from its rounds."""

    tokens_per_s: float
    tokens_per_s_lo: float
    tokens_per_s_hi: float
    speedup: float
    speedup_lo: float
    speedup_hi: float
    reference_tokens_per_s: float
    timing_rounds: int
    threads: int
    tokens: np.ndarray               # [rounds, prompts] tokens the trial's sampler generated
    seconds: np.ndarray              # [rounds, prompts] seconds each of those calls took
    reference_tokens: np.ndarray
    reference_seconds: np.ndarray

    def prompt_seconds(self) -> np.ndarray:
        """Per timed prompt, the median over rounds of the seconds the trial's sampler took (the per-sample table's
        `time_s`)."""
        return np.median(self.seconds, axis=0)

    def speedup_cells(self) -> list[list[float]]:
        """Per timed call (a problem at batch 1), per round, the trial's rate ÷ the reference's in that pair: the
        cells the speed-up is the median of, kept so that an interval can resample problems
        (:func:`clustered_median_interval`)."""
        rates = self.tokens / self.seconds
        reference = self.reference_tokens / self.reference_seconds
        return (rates / reference).T.tolist()

    def attrs(self) -> dict[str, Any]:
        """The trial's user attributes (docs/architecture.md): everything but the objective itself."""
        return {"tokens_per_s_lo": self.tokens_per_s_lo, "tokens_per_s_hi": self.tokens_per_s_hi,
                "speedup": self.speedup, "speedup_lo": self.speedup_lo, "speedup_hi": self.speedup_hi,
                "reference_tokens_per_s": self.reference_tokens_per_s, "timing_rounds": self.timing_rounds,
                "threads": self.threads, "speedup_cells": self.speedup_cells()}


def _reference_rates(tokens: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """Per-call rates of the reference; a call without a positive rate leaves no speed-up to compute."""
    bad = np.argwhere(~((tokens > 0) & (seconds > 0) & np.isfinite(seconds)))
    if bad.size:
        r, i = bad[0]
        raise ReferenceTimingError(f"reference measurement failed: {int(tokens[r, i])} tokens in {seconds[r, i]:.3g} s "
                                   f"on timed prompt {i}, round {r}; a speed-up needs a positive reference rate")
    return tokens / seconds


@contextmanager
def torch_threads(threads: int | None) -> Iterator[int]:
    """Torch's CPU threads set to ``threads`` (None: left as they are) inside the block, restored after it; yields
    the count in use. Warm-ups run inside it too: a call on two threads beside a busy process can take 10x longer."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(int(threads))
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def paired_timing(sample: Sample, reference: Sample | None, prompts: int, *, rounds: int = 3, warmup: int = 1,
                  device: torch.device | str = "cpu", threads: int | None = None, seed: int = 0,
                  progress: Callable[[], None] | None = None,
                  clock: Callable[[], float] = time.perf_counter) -> PairedTiming:
    """Time ``sample`` against ``reference`` on timed prompts ``0 … prompts-1``, in one process.

    First ``warmup`` untimed calls of each (prompts 0, 1, … in turn: allocations, compilation). Then ``rounds``
    rounds, each going through the prompts and timing ``sample(i)`` then ``reference(i)``: A, B, A, B, …, so the
    two calls of a pair run a moment apart, under the same load. Each call is timed alone by a :class:`Timer`
    (synchronised on a GPU). The torch thread count is fixed to ``threads`` (default: the current one) while
    timing, and recorded. ``reference=None``: this trial *is* the reference; it is timed against itself, its
    speed-up is 1 and the interval shows how far two timings of the same sampler disagree. ``progress`` is called
    after each timed call, outside the timing (a progress bar, a deadline check).

    Raises :class:`ReferenceTimingError` when the reference fails (an exception of its own that would otherwise
    read as the trial's invalid settings, or a call without a positive rate): a trial then records FAIL, never a
    speed-up of 0 or infinity."""
    from recdiff.errors import RecdiffError

    if rounds < 2 or prompts < 1:
        raise ValueError(f"paired timing needs rounds >= 2 and prompts >= 1, got rounds={rounds}, prompts={prompts}")
    self_reference = reference is None
    ref = sample if reference is None else reference

    def run_reference(i: int) -> int:
        try:
            return ref(i)
        except RecdiffError as exc:
            raise ReferenceTimingError(f"reference measurement failed: {exc}") from exc

    with torch_threads(threads) as used:
        for k in range(warmup):
            sample(k % prompts)
            run_reference(k % prompts)
        shape = (rounds, prompts)
        tok_a, sec_a, tok_b, sec_b = np.zeros(shape), np.zeros(shape), np.zeros(shape), np.zeros(shape)
        for r in range(rounds):
            for i in range(prompts):
                for fn, tok, sec in ((sample, tok_a, sec_a), (run_reference, tok_b, sec_b)):
                    with Timer(device, clock) as t:
                        n = fn(i)
                    tok[r, i], sec[r, i] = n, t.seconds
                    if progress is not None:
                        progress()

    rate_b = _reference_rates(tok_b, sec_b)
    rate_a = np.where(sec_a > 0, tok_a / np.where(sec_a > 0, sec_a, 1.0), np.nan)
    if not np.isfinite(rate_a).all():
        raise RuntimeError("a timed call of the sampler took no measurable time: the clock cannot time it")
    tps, tps_lo, tps_hi = median_interval(rate_a.ravel(), seed=seed)
    ratio, ratio_lo, ratio_hi = median_interval((rate_a / rate_b).ravel(), seed=seed)
    if self_reference:   # 1 by definition; the interval still shows the timing noise of its rounds
        ratio, ratio_lo, ratio_hi = 1.0, min(ratio_lo, 1.0), max(ratio_hi, 1.0)
    return PairedTiming(tokens_per_s=tps, tokens_per_s_lo=tps_lo, tokens_per_s_hi=tps_hi, speedup=ratio,
                        speedup_lo=ratio_lo, speedup_hi=ratio_hi, reference_tokens_per_s=float(np.median(rate_b)),
                        timing_rounds=rounds, threads=used, tokens=tok_a.astype(int), seconds=sec_a,
                        reference_tokens=tok_b.astype(int), reference_seconds=sec_b)


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class PeakMemory:
    """``with PeakMemory(device) as m: ...`` then ``m.bytes`` (CUDA: peak allocated; CPU: peak RSS)."""

    def __init__(self, device: torch.device | str = "cpu", interval_s: float = 0.01) -> None:
        self.device = torch.device(device)
        self.interval_s = interval_s
        self.bytes = 0

    def __enter__(self) -> "PeakMemory":
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self.bytes = _rss_bytes()
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._poll, name="recdiff-peak-rss", daemon=True)
            self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.bytes = max(self.bytes, _rss_bytes())

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.bytes = int(torch.cuda.max_memory_allocated(self.device))
        else:
            self._stop.set()
            self._thread.join()
            self.bytes = max(self.bytes, _rss_bytes())
