"""The soak's fault schedule: seeded, bounded in time.

Times count from the sweep's first claim (a worker's start-up, which varies with the machine's load, is not part of
the window), each fault drawn uniformly in ``[0, window)``: ``kills`` SIGKILLs of a worker, ``pauses`` SIGSTOPs of a
worker for ``pause_s`` (longer than the grace period: its claim goes stale and is taken over) then SIGCONT,
``restarts`` of the PostgreSQL server (down for ``down_s``), and at most one SIGINT of the whole sweep, in the middle
third of the window, after which the same command runs again. The same seed gives the same schedule; which worker a
fault meets is drawn when it lands, from the same seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

KINDS = ("kill", "pause", "restart", "interrupt")


@dataclass(frozen=True)
class Fault:
    at: float            # seconds after the sweep's first claim
    kind: str            # one of KINDS
    length: float = 0.0  # pause: seconds stopped; restart: seconds the server stays down


@dataclass(frozen=True)
class Schedule:
    seed: int
    window: float
    faults: tuple[Fault, ...]

    def count(self, kind: str) -> int:
        return sum(f.kind == kind for f in self.faults)


def make_schedule(seed: int, window: float, kills: int, pauses: int, restarts: int, interrupt: bool,
                  pause_s: float, down_s: float) -> Schedule:
    rng = random.Random(seed)
    faults = [Fault(rng.uniform(0, window), "kill") for _ in range(kills)]
    faults += [Fault(rng.uniform(0, window), "pause", pause_s) for _ in range(pauses)]
    faults += [Fault(rng.uniform(0, window), "restart", down_s) for _ in range(restarts)]
    if interrupt:
        faults.append(Fault(rng.uniform(window / 3, 2 * window / 3), "interrupt"))
    return Schedule(seed, window, tuple(sorted(faults, key=lambda f: f.at)))
