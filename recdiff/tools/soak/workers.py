"""The soak's workers: N local processes of one sweep on one storage, started as runs of the same command.

Each worker is ``python sweep.py -m <the grid> ...`` (Hydra's basic launcher: the worker's jobs run in its own
process, one after another) with the grid's values in an order of its own, so that workers starting together meet
different configurations first; claims share the grid among them. A worker killed by the soak is started again after
``respawn_s`` with the same command, as a cluster's scheduler requeues a lost job; a run that the soak interrupted
(SIGINT to every worker) starts nothing more, and once all its workers have ended the same command runs again.
Each process writes its stdout and stderr to files of their own (what a user would see on the terminal).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Worker:
    """One worker process: its slot (0..N-1), the run of the command it belongs to, its start within the slot."""
    slot: int
    run: int
    start: int
    proc: subprocess.Popen
    out: Path
    err: Path
    started: float
    ended: float | None = None
    rc: int | None = None
    stopped: bool = False            # SIGSTOP sent, no SIGCONT yet
    signals: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.rc is None

    @property
    def name(self) -> str:
        return f"run{self.run}-w{self.slot}-{self.start}"


class Fleet:
    """The worker processes of the soak; ``command(slot)`` is a worker's command line, the same for every run."""

    def __init__(self, command: Callable[[int], list[str]], n: int, log_dir: Path, env: dict[str, str],
                 cwd: Path, respawn_s: float) -> None:
        self.command, self.n, self.log_dir, self.env, self.cwd = command, n, log_dir, env, cwd
        self.respawn_s = respawn_s
        self.workers: list[Worker] = []
        self.run = 0
        self.interrupted_run: int | None = None
        self._respawn: dict[int, float] = {}     # slot → when to start it again
        log_dir.mkdir(parents=True, exist_ok=True)

    def _spawn(self, slot: int) -> Worker:
        start = sum(w.slot == slot and w.run == self.run for w in self.workers)
        out, err = (self.log_dir / f"run{self.run}-w{slot}-{start}.{s}" for s in ("out", "err"))
        with open(out, "wb") as o, open(err, "wb") as e:
            proc = subprocess.Popen(self.command(slot), cwd=self.cwd, env=self.env, stdout=o, stderr=e,
                                    start_new_session=True)   # the soak's signals only: not a terminal's
        worker = Worker(slot, self.run, start, proc, out, err, time.monotonic())
        self.workers.append(worker)
        return worker

    def start_run(self) -> None:
        """The command again (the first time: the sweep's start): N workers."""
        self.run += 1
        self._respawn.clear()
        for slot in range(self.n):
            self._spawn(slot)

    def live(self) -> list[Worker]:
        return [w for w in self.workers if w.alive]

    def running(self) -> list[Worker]:
        """Live and not stopped."""
        return [w for w in self.live() if not w.stopped]

    def by_pid(self, pid: int) -> Worker | None:
        return next((w for w in self.workers if w.pid == pid), None)

    def poll(self) -> list[Worker]:
        """Note the workers that ended; start again the killed ones that are due. The workers that ended."""
        now, ended = time.monotonic(), []
        for w in self.live():
            rc = w.proc.poll()
            if rc is None:
                continue
            w.rc, w.ended = rc, now
            ended.append(w)
            if "SIGKILL" in w.signals and self.interrupted_run != self.run and w.run == self.run:
                self._respawn[w.slot] = now + self.respawn_s
        for slot, due in list(self._respawn.items()):
            if now >= due:
                del self._respawn[slot]
                self._spawn(slot)
        return ended

    def settled(self) -> bool:
        """No worker alive and none to start again."""
        return not self.live() and not self._respawn

    def signal(self, worker: Worker, sig: signal.Signals) -> bool:
        """Send ``sig``; False when the process had already ended."""
        try:
            os.kill(worker.pid, sig)
        except ProcessLookupError:
            return False
        worker.signals.append(sig.name)
        if sig == signal.SIGSTOP:
            worker.stopped = True
        elif sig == signal.SIGCONT:
            worker.stopped = False
        return True

    def interrupt(self) -> list[Worker]:
        """SIGINT to every live worker of the current run (Ctrl-C of the whole sweep); nothing is started again in
        this run. A stopped worker takes the signal when it is continued. The workers that got it."""
        self.interrupted_run = self.run
        self._respawn.clear()
        return [w for w in self.live() if self.signal(w, signal.SIGINT)]

    def kill_all(self) -> None:
        """End every worker (the soak itself stops: timeout, Ctrl-C)."""
        self._respawn.clear()
        for w in self.live():
            for sig in (signal.SIGCONT, signal.SIGKILL):
                self.signal(w, sig)
            w.proc.wait()
        self.poll()
