"""The soak's faults, landed on the running sweep as the schedule comes due (:mod:`~recdiff.tools.soak.schedule`).

A fault *lands* when it meets what it is meant for, and only then counts:

- **kill**: SIGKILL of a worker that holds a claim (when none does for a grace period past the fault's time, of
  any running worker);
- **pause**: SIGSTOP of a worker that holds a claim, checked after the stop (a worker that finished its trial in
  between is continued at once and another one is tried), then SIGCONT after the pause's length, longer than the
  grace period: another worker takes the claim over meanwhile, and the paused one wakes to find it gone;
- **restart**: the PostgreSQL server stopped (fast: open connections are closed), down for a while, started again;
- **interrupt**: SIGINT of every worker of the run (Ctrl-C of the whole sweep), once its share of the configurations
  is COMPLETE and a worker holds a claim; the same command runs again.

A fault that cannot land yet (no worker holds a claim, the server is restarting already) is tried again until the
window has passed, then reported as not landed with the reason.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from optuna.trial import TrialState

from recdiff.tools.soak.schedule import Fault, Schedule
from recdiff.tools.soak.workers import Fleet, Worker

RETRY_S = 0.5   # how soon a fault that could not land yet is tried again


class Claims:
    """Which worker process holds which RUNNING trial, as the study says (None while the storage cannot say)."""

    def __init__(self, url: str, study: str) -> None:
        self.url, self.study = url, study
        self._storage: Any = None
        self._study_id: int | None = None

    def _trials(self, states: tuple[TrialState, ...]) -> list | None:
        from recdiff.study import open_storage

        try:
            if self._storage is None:
                self._storage = open_storage(self.url, patience_s=1)
            if self._study_id is None:
                self._study_id = self._storage.get_study_id_from_name(self.study)
            return self._storage.get_all_trials(self._study_id, deepcopy=False, states=states)
        except Exception:  # noqa: BLE001 — not yet created, or the server is down: ask again later
            return None

    def holders(self) -> dict[int, list[int]] | None:
        from recdiff.study import CLAIMANT_ATTR

        trials = self._trials((TrialState.RUNNING,))
        if trials is None:
            return None
        held: dict[int, list[int]] = {}
        for t in trials:
            pid = (t.system_attrs.get(CLAIMANT_ATTR) or {}).get("pid")
            if isinstance(pid, int):
                held.setdefault(pid, []).append(t.number)
        return held

    def complete(self) -> int | None:
        """How many configurations are COMPLETE."""
        trials = self._trials((TrialState.COMPLETE,))
        return None if trials is None else len({t.user_attrs.get("config_hash") for t in trials})


@dataclass
class Landed:
    """One fault as it went: when (seconds after the first claim), on which worker, what it held."""
    kind: str
    at: float
    landed: bool
    worker: str = ""
    pid: int | None = None
    held: list[int] = field(default_factory=list)
    note: str = ""


class Chaos:
    def __init__(self, schedule: Schedule, fleet: Fleet, claims: Claims, restart: Callable[[float], None] | None,
                 grace_s: float, configurations: int, log: Callable[[str], None]) -> None:
        self.schedule, self.fleet, self.claims, self.restart = schedule, fleet, claims, restart
        self.configurations = configurations
        self.grace_s, self.log = grace_s, log
        self.rng = random.Random(schedule.seed)
        self.pending: list[Fault] = list(schedule.faults)
        self.t0: float | None = None            # the first claim, when the schedule's clock starts
        self.record: list[Landed] = []
        self._retry_at: dict[int, float] = {}   # id(fault) → not before
        self._cont: list[tuple[float, Worker]] = []
        self._restarting: threading.Thread | None = None

    def now(self) -> float:
        return 0.0 if self.t0 is None else time.monotonic() - self.t0

    def tick(self) -> None:
        if self.t0 is None:
            if not self.claims.holders():
                return
            self.t0 = time.monotonic()
            self.log("first claim: the fault schedule starts")
        for due, w in [c for c in self._cont if time.monotonic() >= c[0]]:
            self._cont.remove((due, w))
            if self.fleet.signal(w, signal.SIGCONT):
                self.log(f"SIGCONT {w.name} (pid {w.pid})")
        for fault in [f for f in self.pending if self._due(f)]:
            if time.monotonic() < self._retry_at.get(id(fault), 0.0):
                continue
            done = getattr(self, f"_{fault.kind}")(fault)
            if done:
                self.pending.remove(fault)
            elif fault.kind != "interrupt" and self.now() > self.schedule.window + fault.length + self.grace_s:
                self.pending.remove(fault)
                self._note(fault, False, note="nothing to land on before the window ended")
            else:
                self._retry_at[id(fault)] = time.monotonic() + RETRY_S

    def _due(self, fault: Fault) -> bool:
        if fault.kind != "interrupt":
            return fault.at <= self.now()
        done = self.claims.complete()
        return done is not None and done >= fault.at * self.configurations

    def finish(self) -> None:
        """The sweep has ended: faults still pending did not land."""
        if self._restarting is not None:
            self._restarting.join()
        for fault in self.pending:
            self._note(fault, False, note="the sweep ended first")
        self.pending = []

    def _note(self, fault: Fault, landed: bool, worker: Worker | None = None, held: list[int] | None = None,
              note: str = "") -> None:
        self.record.append(Landed(fault.kind, round(self.now(), 1), landed, worker.name if worker else "",
                                  worker.pid if worker else None, held or [], note))

    # -------------------------------------------------------------------------------------------- the faults
    def _kill(self, fault: Fault) -> bool:
        running = self.fleet.running()
        if not running:
            return False
        holders = self.claims.holders() or {}
        holding = [w for w in running if w.pid in holders]
        if not holding and self.now() < fault.at + self.grace_s:   # wait a little for a worker that holds one
            return False
        w = self.rng.choice(holding or running)
        if not self.fleet.signal(w, signal.SIGKILL):
            return False
        self.log(f"SIGKILL {w.name} (pid {w.pid}, holding trials {holders.get(w.pid, [])})")
        self._note(fault, True, w, holders.get(w.pid, []))
        return True

    def _pause(self, fault: Fault) -> bool:
        holders = self.claims.holders()
        holding = [w for w in self.fleet.running() if holders and w.pid in holders]
        if not holding:
            return False
        w = self.rng.choice(holding)
        if not self.fleet.signal(w, signal.SIGSTOP):
            return False
        held = (self.claims.holders() or {}).get(w.pid, [])
        if not held:   # it finished its trial in between: let it go on, try again
            self.fleet.signal(w, signal.SIGCONT)
            return False
        self._cont.append((time.monotonic() + fault.length, w))
        self.log(f"SIGSTOP {w.name} (pid {w.pid}, holding trials {held}) for {fault.length:g} s")
        self._note(fault, True, w, held)
        return True

    def _restart(self, fault: Fault) -> bool:
        if self.restart is None:
            self._note(fault, False, note="no server to restart (a journal storage)")
            return True
        if self._restarting is not None and self._restarting.is_alive():
            return False
        at = round(self.now(), 1)

        def restart() -> None:
            try:
                self.restart(fault.length)
            except Exception as err:  # noqa: BLE001 — reported in the table
                self.record.append(Landed("restart", at, False, note=f"restart failed: {err}"))
                return
            self.record.append(Landed("restart", at, True, note=f"down {fault.length:g} s"))
            self.log(f"server restarted (down {fault.length:g} s)")

        self.log("server restart")
        self._restarting = threading.Thread(target=restart, name="soak-restart", daemon=True)
        self._restarting.start()
        return True

    def _interrupt(self, fault: Fault) -> bool:
        if not self.claims.holders():   # between trials: wait until one runs, so that the interrupt meets it
            return False
        got = self.fleet.interrupt()
        if not got:
            return False
        self.log(f"SIGINT to the whole sweep (run {self.fleet.run}: {len(got)} workers)")
        self._note(fault, True, note=f"{len(got)} workers of run {self.fleet.run}")
        return True
