"""The soak's fault schedule: seeded, bounded in time.

Times count from the sweep's first claim (a worker's start-up, which varies with the machine's load, is not part of
the window), each fault drawn uniformly in ``[0, window)``: ``kills`` SIGKILLs of a worker, ``pauses`` SIGSTOPs of a
worker for ``pause_s`` (longer than the grace period: its claim goes stale and is taken over) then SIGCONT,
``restarts`` of the PostgreSQL server (down for ``down_s``). And at most one SIGINT of the whole sweep, after which
the same command runs again: not at a time but once a share of the configurations is COMPLETE, drawn between a third
and two thirds, so that it meets the sweep in its middle however fast the machine is. The same seed gives the same
schedule; which worker a fault meets is drawn when it lands, from the same seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

KINDS = ("kill", "pause", "restart", "interrupt")


@dataclass(frozen=True)
class Fault:
    at: float            # seconds after the sweep's first claim; interrupt: the share of configurations COMPLETE
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
    faults.sort(key=lambda f: f.at)
    if interrupt:
        faults.append(Fault(rng.uniform(1 / 3, 2 / 3), "interrupt"))
    return Schedule(seed, window, tuple(faults))
