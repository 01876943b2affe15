"""Optuna's storage beneath a study: the one module that touches Optuna's private API, and what needs it.

Optuna's ``Study`` and ``Trial`` expose their storage and ids only as private attributes (``study._storage``,
``trial._trial_id``, ``study._study_id``), and heartbeats, the journal's lock and its operation codes only in private
modules. Recording a trial that ``study.ask`` did not create (a claimed grid configuration, a retry, a trial failed
because its worker died or was interrupted) needs the storage API beneath them, so every such access is here, where
an Optuna upgrade that moves them breaks one module.

A RUNNING trial names its claimant (:mod:`~recdiff.study.claimant`), carries its claim's token and sends heartbeats.
The next worker that looks fails it (``fail_kind=worker_died``) once its claimant is gone from this machine, or else
once its heartbeat is older than ``study.grace_period``, and re-queues it as a WAITING trial that carries what to run
(params, ``config_hash``, ``identity``) and nothing of how the failed attempt went.

**Fencing.** Every end of a claimed trial (its holder's outcome, a stale claim failed by another worker, an interrupted
one) is one atomic step, :func:`finish_claim`: the trial's attributes and its final state are written only if the trial
is still RUNNING under the claim token the writer holds (or, for a worker failing a stale claim, the token it judged
stale), in a database in one transaction that holds the trial's row lock, in a journal in one append under the
journal's lock after reading it to its end. Of a paused holder and the worker that takes its claim over, exactly one
ends the trial, and nothing of the other's is written on it.
"""

from __future__ import annotations

import copy
import datetime
import logging
import threading
import time
import uuid
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import optuna
from optuna.storages import BaseStorage, JournalStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages._cached_storage import _CachedStorage
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
CLAIM_ATTR = "recdiff:claim"         # the token of the claim on a RUNNING trial: whoever ends the trial must hold it
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


def new_token() -> str:
    """A claim's token: unique to one claim of one trial."""
    return uuid.uuid4().hex


def claim_token(trial: optuna.trial.Trial | FrozenTrial) -> str | None:
    """The token of the trial's claim (an asked ``Trial``, as the tune's search holds, keeps its attributes in the
    storage only)."""
    if isinstance(trial, FrozenTrial):
        return trial.system_attrs.get(CLAIM_ATTR)
    return storage_of(trial.study).get_trial_system_attrs(trial_id(trial)).get(CLAIM_ATTR)


def _backend(storage: BaseStorage) -> BaseStorage:
    """The storage beneath Optuna's cache (a database storage is wrapped in one)."""
    return storage._backend if isinstance(storage, _CachedStorage) else storage


def finish_claim(storage: BaseStorage, tid: int, token: str | None, state: TrialState,
                 values: Sequence[float] | None, attrs: Mapping[str, Any]) -> bool:
    """End a claimed trial: ``attrs`` (user attributes), then ``state`` and ``values``, written in one atomic step only
    if the trial is still RUNNING under the claim ``token``; False (nothing written) when it is not: its claim was taken
    over, or it ended otherwise. recdiff's journal and database storages do it atomically; any other storage checks,
    then writes."""
    inner = _backend(storage)
    if hasattr(inner, "finish_held"):
        return inner.finish_held(tid, token, state, values, dict(attrs))
    trial = storage.get_trial(tid)
    if trial.state != TrialState.RUNNING or claim_token(trial) != token:
        return False
    try:
        for k, v in attrs.items():
            storage.set_trial_user_attr(tid, k, v)
        storage.set_trial_state_values(tid, state, values)
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
    return True


class RetryStaleTrial(RetryHeartbeatStaleTrialCallback):
    """Optuna's retry callback, without the failed attempt's user attributes (``fail_reason``, measurements) or its
    last heartbeat, which would make the retry look stale before it starts."""

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        clean = copy.deepcopy(trial)
        clean.user_attrs = {k: v for k, v in trial.user_attrs.items() if k in RETRY_KEEPS}
        clean.system_attrs = {k: v for k, v in trial.system_attrs.items()
                              if k not in (HEARTBEAT_ATTR, CLAIMANT_ATTR, CLAIM_ATTR)}
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

    def finish_held(self, trial_id: int, token: str | None, state: TrialState, values: Sequence[float] | None,
                    attrs: dict[str, Any]) -> bool:
        """:func:`finish_claim` in one append: the journal is read to its end and the claim checked while the journal's
        lock is held, so that no other process's record comes between the check and the write."""
        done = datetime.datetime.now(tz=datetime.timezone.utc).isoformat(timespec="microseconds")
        with self._thread_lock, self._backend.exclusive():
            self._sync_with_backend()
            trial = self._replay_result.get_trial(trial_id)
            if trial.state != TrialState.RUNNING or claim_token(trial) != token:
                return False
            worker = self._replay_result.worker_id
            logs = [{"op_code": JournalOperation.SET_TRIAL_USER_ATTR, "worker_id": worker, "trial_id": trial_id,
                     "user_attr": {k: v}} for k, v in attrs.items()]
            logs.append({"op_code": JournalOperation.SET_TRIAL_STATE_VALUES, "worker_id": worker,
                         "trial_id": trial_id, "state": state, "values": None if values is None else list(values),
                         "datetime_complete": done})
            self._backend.append_logs(logs)
            self._sync_with_backend()
        return True


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
            # fenced on the claim judged stale: a holder that woke and recorded meanwhile, or another worker that
            # failed it first, wins; then nothing is written here
            token = claim_token(storage.get_trial(tid))
            if finish_claim(storage, tid, token, TrialState.FAIL, None,
                            {"fail_kind": "worker_died", "fail_reason": reason}):
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


def fail_interrupted(study: optuna.Study, trial: FrozenTrial, reason: str = "interrupted") -> None:
    """Ctrl-C / SIGTERM (or an error that stops the job) during a trial: FAIL it as interrupted and re-queue it, if
    this process still holds its claim."""
    storage, tid = study._storage, trial._trial_id
    if not finish_claim(storage, tid, claim_token(trial), TrialState.FAIL, None,
                        {"fail_kind": "interrupted", "fail_reason": reason}):
        log.debug("trial %d: its claim was taken over; not failed here", trial.number)
        return
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
def holding(study: optuna.Study, trial: FrozenTrial, interval: int) -> Iterator[None]:
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
