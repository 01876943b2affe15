"""The scheduler: which sequence runs in which slot (continuous batching). Plain Python over host-side records.

A sampler's batch state (:class:`SlotBatch`) prefills requests into free slots (``admit``, all of them in one
padded model call), advances every occupied slot by one sampler step (``step``, which reads back from the device
once and returns the slots that finished) and hands over a finished slot's result (``finish``). :func:`run_batched`
keeps the slots busy: a sequence that finishes leaves and waiting prompts take the free places, so one long answer
does not hold the others, and results come back in the order of the prompts.

Admissions are grouped: while other sequences run, waiting prompts enter once a quarter of the slots (or every
remaining prompt) can enter together. A prefill runs r recurrences over the whole prompt and costs about as much
per call for one prompt as for several, so prefilling in groups buys more than a slot left idle for a few steps
costs. Prompts wait longest first: a prefill pads its prompts to the longest among them, so prompts of similar
length admitted together pad little (docs/speed.md).
No sequence's result depends on when it is admitted or next to whom.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import torch


@dataclass(kw_only=True)
class Record:
    """One sequence's host-side record, every sampler's (a sampler's own subclass adds what it keeps): its new tokens
    so far, whether and why it stopped, and the core passes and token·recurrences it cost."""

    tokens: list[int] = field(default_factory=list)
    done: bool = False
    stopped_by: str = "length"
    core_passes: int = 0
    tokens_forward: int = 0


@dataclass
class Request:
    """One prompt and everything that is its own: its length limit, its random stream, whether it records a trace,
    and (from its admission) the sampler's record of it."""

    index: int
    prompt: list[int]
    max_new_tokens: int
    generator: torch.Generator
    trace: bool = False
    record: Any = None  # a Record subclass of the sampler's


class SlotBatch(Protocol):
    slots: int

    def admit(self, entries: list[tuple[int, Request]]) -> None: ...

    def step(self) -> list[int]: ...

    def finish(self, slot: int) -> Any: ...


def run_batched(batch: SlotBatch, requests: list[Request], progress: Callable[[int], None] | None = None) -> list[Any]:
    """Every request's result, in the order of ``requests``. A result with a ``time_s`` attribute gets the seconds from
    its admission to the step it finished in (each step ends with a read-back from the device, so that is a sync)."""
    waiting = deque(sorted(requests, key=lambda r: -len(r.prompt)))  # stable: equal lengths keep their order
    free = list(range(batch.slots))[::-1]
    busy: set[int] = set()
    results: list[Any] = [None] * len(requests)
    owner: dict[int, int] = {}
    admitted: dict[int, float] = {}
    group = max(1, batch.slots // 4)
    while waiting or busy:
        if waiting and free and (not busy or len(free) >= min(group, len(waiting))):
            entries = []
            now = time.perf_counter()
            while waiting and free:
                slot, req = free.pop(), waiting.popleft()
                owner[slot] = req.index
                admitted[slot] = now
                entries.append((slot, req))
                busy.add(slot)
            batch.admit(entries)
        finished = batch.step()
        done = time.perf_counter()
        for slot in finished:
            result = results[owner.pop(slot)] = batch.finish(slot)
            if hasattr(result, "time_s"):
                result.time_s = done - admitted.pop(slot)
            busy.discard(slot)
            free.append(slot)
            if progress is not None:
                progress(1)
    return results
