"""Opening storages and studies; heartbeats of RUNNING trials, and what happens when they stop.

A RUNNING trial sends heartbeats; one whose heartbeat is older than ``study.grace_period`` (its worker died) is failed
by the next worker that looks (``fail_kind=worker_died``) and re-queued as a WAITING trial that carries what to run
(params, ``config_hash``, ``identity``) and nothing of how the failed attempt went.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.trial import FrozenTrial, TrialState
from omegaconf import DictConfig

from recdiff.errors import RecdiffError
from recdiff.study.journal import JournalFile, replayed

log = logging.getLogger("recdiff.study")
# Heartbeats, retry callbacks, metric names and artifacts are "experimental" in Optuna; we rely on them knowingly.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")

HEARTBEAT_ATTR = "recdiff:heartbeat"
# What a retried trial inherits from the trial it retries: what to run, not how the attempt went.
RETRY_KEEPS = ("config_hash", "identity")


class RetryStaleTrial(RetryHeartbeatStaleTrialCallback):
    """Optuna's retry callback, without the failed attempt's user attributes (``fail_reason``, measurements) or its
    last heartbeat, which would make the retry look stale before it starts."""

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        clean = copy.deepcopy(trial)
        clean.user_attrs = {k: v for k, v in trial.user_attrs.items() if k in RETRY_KEEPS}
        clean.system_attrs = {k: v for k, v in trial.system_attrs.items() if k != HEARTBEAT_ATTR}
        super().__call__(study, clean)


class HeartbeatJournalStorage(JournalStorage, BaseHeartbeat):
    """Optuna's journal storage plus heartbeats (Optuna has them for RDB storages only), on :class:`JournalFile`.

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
        self.set_trial_system_attr(trial_id, HEARTBEAT_ATTR, time.time())

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        now = time.time()
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


def resolve_storage_url(url: str) -> str:
    """A journal file path is made absolute (workers may run elsewhere); URLs pass through."""
    if "://" in url:
        return url
    return str(Path(os.path.expanduser(url)).resolve())


def sqlalchemy_url(url: str) -> str:
    """``postgresql://`` names the psycopg2 driver we install (SQLAlchemy 2.1 would pick psycopg 3 for it)."""
    scheme, sep, rest = url.partition("://")
    return f"postgresql+psycopg2://{rest}" if sep and scheme in ("postgresql", "postgres") else url


def journal_path(url: str) -> Path | None:
    """The journal file of a storage URL, None for a database."""
    return None if "://" in url else Path(resolve_storage_url(url))


def open_storage(url: str, heartbeat_interval: int = 10, grace_period: int = 60, max_retry: int = 2) -> BaseStorage:
    """A path = journal file; ``sqlite:///``, ``postgresql://``, ``mysql://`` = RDB storage. A storage that cannot be
    read is one :class:`RecdiffError` line naming the file (and for a journal the line)."""
    retry = RetryStaleTrial(max_retry=max_retry)
    url = resolve_storage_url(url)
    scheme = url.split("://", 1)[0].split("+", 1)[0] if "://" in url else None
    if scheme is None:
        path = Path(url)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            backend = JournalFile(str(path))
            return replayed(backend, lambda: HeartbeatJournalStorage(backend, heartbeat_interval, grace_period, retry))
        except OSError as e:
            raise RecdiffError(f"cannot open journal storage {url}: {e.strerror or e}") from None
    if scheme not in ("sqlite", "postgresql", "postgres", "mysql"):
        raise RecdiffError(f"unknown storage {url!r}: use a journal file path, sqlite:///file.db or "
                           "postgresql://user@host:port/db")
    url = sqlalchemy_url(url)
    if scheme == "sqlite":
        db = url.split(":///", 1)[-1]
        if db and db != ":memory:":
            Path(db).expanduser().parent.mkdir(parents=True, exist_ok=True)
    # Workers starting together on a fresh database race to create Optuna's schema; the losers see a
    # unique-violation from the DDL and succeed on a retry once the winner has committed.
    for attempt in range(5):
        try:
            return RDBStorage(url, heartbeat_interval=heartbeat_interval, grace_period=grace_period,
                              heartbeat_stale_trial_callback=retry,
                              engine_kwargs={"pool_pre_ping": True} if scheme != "sqlite" else None)
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            racing = any(s in first for s in ("UniqueViolation", "already exists", "duplicate key"))
            if not racing or attempt == 4:
                raise RecdiffError(f"cannot open storage {url}: {first}") from None
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def open_study(study_cfg: DictConfig, storage: BaseStorage,
               sampler: optuna.samplers.BaseSampler | None = None) -> optuna.Study:
    directions = [str(d) for d in study_cfg.directions]
    names = [str(n) for n in study_cfg.metric_names]
    if len(names) != len(directions) or any(d not in ("maximize", "minimize") for d in directions):
        raise RecdiffError(f"study.directions={directions} must be maximize/minimize, one per study.metric_names")
    study = optuna.create_study(study_name=str(study_cfg.name), storage=storage, directions=directions,
                                sampler=sampler, load_if_exists=True)
    have = [d.name.lower() for d in study.directions]
    if have != directions:
        raise RecdiffError(f"study {study.study_name!r} exists with directions {have}, not {directions}")
    if study.metric_names != names:
        study.set_metric_names(names)
    return study


def load_study(storage_url: str, study_name: str) -> optuna.Study:
    """Open an existing study for reading (fails stale RUNNING trials first)."""
    storage = open_storage(storage_url)
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        raise RecdiffError(f"no study {study_name!r} in {storage_url}") from None
    fail_stale_trials(study)
    return study


def fail_stale_trials(study: optuna.Study) -> list[int]:
    """Fail RUNNING trials whose worker stopped sending heartbeats; re-queue them (max_retry)."""
    storage = study._storage
    if not isinstance(storage, BaseHeartbeat) or storage.get_heartbeat_interval() is None:
        return []
    failed = []
    for trial_id in storage._get_stale_trial_ids(study._study_id):
        try:
            storage.set_trial_user_attr(trial_id, "fail_kind", "worker_died")
            storage.set_trial_user_attr(trial_id, "fail_reason", "worker died (no heartbeat within the grace period)")
            if storage.set_trial_state_values(trial_id, state=TrialState.FAIL):
                failed.append(trial_id)
        except (optuna.exceptions.UpdateFinishedTrialError, RuntimeError, KeyError):
            continue   # another worker got there first
    callback = storage.get_heartbeat_stale_trial_callback()
    for trial_id in failed:
        trial = copy.deepcopy(storage.get_trial(trial_id))
        log.warning("trial %d: worker died; failed and re-queued", trial.number)
        if callback is not None:
            callback(study, trial)
    return failed


class Heartbeat:
    """Records heartbeats for one RUNNING trial from a daemon thread."""

    def __init__(self, storage: BaseStorage, trial_id: int, interval: int) -> None:
        self.storage = storage
        self.trial_id, self.interval = trial_id, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recdiff-heartbeat", daemon=True)

    def _run(self) -> None:
        while True:
            try:
                if isinstance(self.storage, BaseHeartbeat):
                    self.storage.record_heartbeat(self.trial_id)
            except Exception:  # noqa: BLE001 — a finished or failed trial stops beating
                return
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
