"""Device-synchronised timing and peak memory for the trial runner.

On CUDA a :class:`Timer` records CUDA events around the measured region and synchronises before reading
them (the paper's measurement); on CPU it reads ``time.perf_counter``. Warm-up calls are simply not timed
by the caller. :class:`PeakMemory` reports the peak CUDA allocation, or on CPU the peak resident set size
of the process while the block ran (sampled from ``/proc/self/statm``).
"""

from __future__ import annotations

import os
import resource
import statistics
import threading
import time
from typing import Iterable

import torch


class Timer:
    """``with Timer(device) as t: ...`` then ``t.seconds``."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.seconds = float("nan")

    def __enter__(self) -> "Timer":
        if self.cuda:
            torch.cuda.synchronize(self.device)
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.cuda:
            self._end.record()
            torch.cuda.synchronize(self.device)
            self.seconds = self._start.elapsed_time(self._end) / 1000.0
        else:
            self.seconds = time.perf_counter() - self._t0


def median_tokens_per_s(new_tokens: Iterable[int], seconds: Iterable[float]) -> float:
    """Median over samples of tokens/s per sample (the paper's "t/s"); 0 when there is no sample."""
    rates = [n / s for n, s in zip(new_tokens, seconds) if s > 0]
    return float(statistics.median(rates)) if rates else 0.0


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
