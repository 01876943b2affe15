"""Optuna's storage beneath a study: the one module that touches Optuna's private API, and what needs it.

Optuna's ``Study`` and ``Trial`` expose their storage and ids only as private attributes (``study._storage``,
``trial._trial_id``, ``study._study_id``), and heartbeats, the journal's lock and its operation codes only in private
modules. Recording a trial that ``study.ask`` did not create (a claimed grid configuration, a retry, a trial failed
because its worker died or was interrupted) needs the storage API beneath them, so every such access is here, where
an Optuna upgrade that moves them breaks one module.

A RUNNING trial names its claimant (:mod:`~recdiff.study.claimant`) and sends heartbeats. The next worker that looks
fails it (``fail_kind=worker_died``) once its claimant is gone from this machine, or else once its heartbeat is older
than ``study.grace_period``, and re-queues it as a WAITING trial that carries what to run (params, ``config_hash``,
``identity``) and nothing of how the failed attempt went.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from contextlib import contextmanager
import threading
import time
import warnings
from typing import Any

import optuna
from optuna.storages import BaseStorage, JournalStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.storages.journal._file import get_lock_file
from optuna.storages.journal._storage import JournalOperation
from optuna.trial import FrozenTrial, TrialState

from recdiff.study import claimant

log = logging.getLogger("recdiff.study")
# Heartbeats, retry callbacks, metric names and artifacts are "experimental" in Optuna; we rely on them knowingly.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")

HEARTBEAT_ATTR = "recdiff:heartbeat"
CLAIMANT_ATTR = "recdiff:claimant"   # the machine and process holding a RUNNING trial (recdiff.study.claimant)
clock = time.time                    # heartbeats' clock (journal storage); tests replace it
# What a retried trial inherits from the trial it retries: what to run, not how the attempt went.
RETRY_KEEPS = ("config_hash", "identity")
# The operation codes of Optuna's journal records (recdiff.study.journal tells a record from a fragment by them).
JOURNAL_OP_CODES = frozenset(int(op) for op in JournalOperation)
journal_lock = get_lock_file   # context manager: hold a journal file's lock (recdiff.study.journal)


def storage_of(study: optuna.Study) -> BaseStorage:
    return study._storage


def trial_id(trial: optuna.trial.Trial | FrozenTrial) -> int:
    """The storage's id of a trial (not its number within the study)."""
    return trial._trial_id


def study_id(study: optuna.Study) -> int:
    return study._study_id


class RetryStaleTrial(RetryHeartbeatStaleTrialCallback):
    """Optuna's retry callback, without the failed attempt's user attributes (``fail_reason``, measurements) or its
    last heartbeat, which would make the retry look stale before it starts."""

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        clean = copy.deepcopy(trial)
        clean.user_attrs = {k: v for k, v in trial.user_attrs.items() if k in RETRY_KEEPS}
        clean.system_attrs = {k: v for k, v in trial.system_attrs.items() if k not in (HEARTBEAT_ATTR, CLAIMANT_ATTR)}
        super().__call__(study, clean)


class HeartbeatJournalStorage(JournalStorage, BaseHeartbeat):
    """Optuna's journal storage plus heartbeats (Optuna has them for RDB storages only).

    The heartbeat is a trial system attribute holding a UNIX time; a RUNNING trial whose last heartbeat
    (or start, before the first one) is older than ``grace_period`` seconds is stale.
    """

    def __init__(self, backend: Any, heartbeat_interval: int, grace_period: int,
                 stale_callback: Any = None) -> None:
        super().__init__(backend)
        self._heartbeat_interval = heartbeat_interval
        self._grace_period = grace_period
        self._stale_callback = stale_callback

    def record_heartbeat(self, trial_id: int) -> None:
        self.set_trial_system_attr(trial_id, HEARTBEAT_ATTR, clock())

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        now = clock()
        stale = []
        for t in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
            last = t.system_attrs.get(HEARTBEAT_ATTR)
            if last is None and t.datetime_start is not None:
                last = t.datetime_start.timestamp()
            if last is not None and now - float(last) > self._grace_period:
                stale.append(t._trial_id)
        return stale

    def get_heartbeat_interval(self) -> int | None:
        return self._heartbeat_interval

    def get_heartbeat_stale_trial_callback(self) -> Any:
        return self._stale_callback


def record_heartbeat(study: optuna.Study, trial: optuna.trial.Trial | FrozenTrial) -> None:
    storage = study._storage
    if isinstance(storage, BaseHeartbeat):
        storage.record_heartbeat(trial._trial_id)


def _gone(study: optuna.Study) -> dict[int, str]:
    """RUNNING trials whose claimant ran on this machine and has ended: trial id → why."""
    return {t._trial_id: f"worker died ({claimant.describe(who)} is gone)"
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if claimant.is_gone(who := t.system_attrs.get(CLAIMANT_ATTR))}


def fail_stale_trials(study: optuna.Study) -> list[int]:
    """Fail RUNNING trials whose worker is gone (its process has ended on this machine, or it sent no heartbeat
    within the grace period); re-queue them (max_retry)."""
    storage = study._storage
    if not isinstance(storage, BaseHeartbeat) or storage.get_heartbeat_interval() is None:
        return []
    why = {tid: "worker died (no heartbeat within the grace period)"
           for tid in storage._get_stale_trial_ids(study._study_id)}
    why.update(_gone(study))
    failed = []
    for tid, reason in why.items():
        try:
            storage.set_trial_user_attr(tid, "fail_kind", "worker_died")
            storage.set_trial_user_attr(tid, "fail_reason", reason)
            if storage.set_trial_state_values(tid, state=TrialState.FAIL):
                failed.append(tid)
        except (optuna.exceptions.UpdateFinishedTrialError, RuntimeError, KeyError):
            continue   # another worker got there first
    callback = storage.get_heartbeat_stale_trial_callback()
    for tid in failed:
        trial = copy.deepcopy(storage.get_trial(tid))
        log.warning("trial %d: %s; failed and re-queued", trial.number, why[tid])
        if callback is not None:
            callback(study, trial)
    return failed


def fail_interrupted(study: optuna.Study, trial: optuna.trial.Trial | FrozenTrial, reason: str = "interrupted") -> None:
    """Ctrl-C / SIGTERM (or an error that stops the job) during a trial: FAIL it as interrupted and re-queue it."""
    storage, tid = study._storage, trial._trial_id
    for k, v in {"fail_kind": "interrupted", "fail_reason": reason}.items():
        storage.set_trial_user_attr(tid, k, v)
    storage.set_trial_state_values(tid, TrialState.FAIL)
    callback = getattr(storage, "get_heartbeat_stale_trial_callback", lambda: None)()
    if callback is not None:
        callback(study, copy.deepcopy(storage.get_trial(tid)))


class Heartbeat:
    """Records heartbeats for one RUNNING trial from a daemon thread."""

    def __init__(self, study: optuna.Study, trial: optuna.trial.Trial | FrozenTrial, interval: int) -> None:
        self.study, self.trial, self.interval = study, trial, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recdiff-heartbeat", daemon=True)

    def _run(self) -> None:
        while True:
            try:
                record_heartbeat(self.study, self.trial)
            except (optuna.exceptions.UpdateFinishedTrialError, KeyError):   # finished, or failed by another worker
                return
            except Exception as err:  # noqa: BLE001 — storage briefly unreachable or full: beat again next time
                log.debug("heartbeat of trial %d not recorded: %s", self.trial.number, err)
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _stopped_by(err: BaseException) -> str:
    if isinstance(err, (KeyboardInterrupt, SystemExit)):
        return f"interrupted ({err})" if str(err) else "interrupted"
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"interrupted: {type(err).__name__}: {first}".rstrip(": ")


@contextmanager
def holding(study: optuna.Study, trial: optuna.trial.Trial | FrozenTrial, interval: int) -> Iterator[None]:
    """Heartbeats while a claimed trial is worked on. Whatever ends the work early (Ctrl-C, SIGTERM, an error that
    stops the job) fails the trial as interrupted and re-queues it; where the storage cannot take even that (lost,
    full), the trial stays RUNNING, and the next worker finds its claimant gone."""
    try:
        with Heartbeat(study, trial, interval):
            yield
    except BaseException as err:
        try:
            fail_interrupted(study, trial, _stopped_by(err))
        except Exception as inner:  # noqa: BLE001 — the error that stopped us is the one to report
            log.debug("trial %d left RUNNING: %s", trial.number, inner)
        raise
