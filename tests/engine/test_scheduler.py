"""The scheduler on its own (a recording slot batch, no model): results come back in prompt order whatever the order
of admission, slots are reused, waiting prompts enter longest first so that a prefill pads little, and each result
holds the time from its admission to its last step."""

from __future__ import annotations

import pytest
import torch

from recdiff.engine import scheduler
from recdiff.engine.scheduler import Request, run_batched
from recdiff.samplers.base import GenerationResult


class Recorder:
    """A slot batch whose sequence in a slot finishes after as many steps as its prompt has tokens."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.admitted: list[list[int]] = []  # prompt lengths of each admission
        self.left: dict[int, int] = {}
        self.prompt: dict[int, list[int]] = {}

    def admit(self, entries: list[tuple[int, Request]]) -> None:
        assert all(slot not in self.left for slot, _ in entries)  # a slot holds one sequence at a time
        self.admitted.append([len(r.prompt) for _, r in entries])
        for slot, r in entries:
            self.left[slot], self.prompt[slot] = len(r.prompt), r.prompt

    def step(self) -> list[int]:
        for slot in self.left:
            self.left[slot] -= 1
        return [slot for slot, n in self.left.items() if n == 0]

    def finish(self, slot: int) -> list[int]:
        del self.left[slot]
        return self.prompt.pop(slot)


def test_results_in_prompt_order_and_longest_admitted_first():
    lengths = [3, 9, 1, 7, 7, 2, 5, 8, 4, 6]
    prompts = [[i] * n for i, n in enumerate(lengths)]
    requests = [Request(i, p, 4, torch.Generator()) for i, p in enumerate(prompts)]
    batch = Recorder(slots=4)
    done: list[int] = []
    assert run_batched(batch, requests, progress=done.append) == prompts
    assert len(done) == len(prompts)
    order = [n for group in batch.admitted for n in group]
    assert order == sorted(lengths, reverse=True)
    assert batch.admitted[0] == [9, 8, 7, 7]  # the first prefill: the four longest, padded to 9, not to 3-9 mixed


class FakeClock:
    """The scheduler's ``time``: ``perf_counter`` reads a clock that only a step moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now


class Timed(Recorder):
    """As :class:`Recorder`, each step taking ``dt`` seconds of a fake clock and each result a
    :class:`GenerationResult`."""

    dt = 0.02

    def __init__(self, slots: int, clock: FakeClock) -> None:
        super().__init__(slots)
        self.clock = clock

    def step(self) -> list[int]:
        self.clock.now += self.dt
        return super().step()

    def finish(self, slot: int) -> GenerationResult:
        return GenerationResult(tokens=super().finish(slot), stats={})


def test_each_result_times_its_own_stay_in_the_batch(monkeypatch):
    # one slot: each sequence runs alone for as many steps as its prompt has tokens; two slots: the short sequence
    # leaves after 2 steps while the long one stays for 6
    clock = FakeClock()
    monkeypatch.setattr(scheduler, "time", clock)
    for slots in (1, 2):
        requests = [Request(i, [i] * n, 4, torch.Generator()) for i, n in enumerate([2, 6])]
        results = run_batched(Timed(slots, clock), requests)
        assert [res.time_s for res in results] == pytest.approx([2 * Timed.dt, 6 * Timed.dt])
    assert GenerationResult([1], {}, time_s=1.0) == GenerationResult([1], {}, time_s=2.0)  # timing is no identity
