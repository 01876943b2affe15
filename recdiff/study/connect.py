"""Storages by URL and studies by name: a journal file (one machine) or a database (several hosts).

Opening a storage that cannot be read is one :class:`RecdiffError` line naming the file (and for a journal the line);
a study opened for a sweep gets the study's directions and metric names (``StudyConfig``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import optuna
from optuna.storages import BaseStorage

from recdiff.errors import RecdiffError
from recdiff.study.journal import JournalFile, replayed
from recdiff.study.reconnect import Outage, ReconnectingRDBStorage, lost_connection, shown
from recdiff.study.storage import HeartbeatJournalStorage, RetryStaleTrial, fail_stale_trials

if TYPE_CHECKING:
    from recdiff.schema import StudyConfig


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


def open_storage(url: str, heartbeat_interval: int = 10, grace_period: int = 60, max_retry: int = 2,
                 patience_s: float | None = None) -> BaseStorage:
    """A path = journal file; ``sqlite:///``, ``postgresql://``, ``mysql://`` = RDB storage. A storage that cannot be
    read is one :class:`RecdiffError` line naming the file (and for a journal the line). A database that does not
    answer (down, restarting), now or later, is waited for up to ``patience_s`` (default: the grace period), then the
    sweep stops with one :class:`~recdiff.errors.SweepStopped` line (:mod:`recdiff.study.reconnect`)."""
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
    shown_url, url = shown(url), sqlalchemy_url(url)
    if scheme == "sqlite":
        db = url.split(":///", 1)[-1]
        if db and db != ":memory:":
            Path(db).expanduser().parent.mkdir(parents=True, exist_ok=True)
    # A server that is down or restarting is waited for, as every later storage call waits (Outage). Workers starting
    # together on a fresh database race to create Optuna's schema; the losers see a unique-violation from the DDL and
    # succeed on a retry once the winner has committed.
    patience = grace_period if patience_s is None else patience_s
    outage, racing_tries = Outage(shown_url, patience), 0
    while True:
        try:
            storage = ReconnectingRDBStorage(
                url, patience_s=patience, shown_url=shown_url, heartbeat_interval=heartbeat_interval,
                grace_period=grace_period, heartbeat_stale_trial_callback=retry,
                engine_kwargs={"pool_pre_ping": True} if scheme != "sqlite" else None)
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            if lost_connection(e) is not None:
                outage.wait(e)
                continue
            racing = any(s in first for s in ("UniqueViolation", "already exists", "duplicate key"))
            if not racing or racing_tries == 4:
                raise RecdiffError(f"cannot open storage {shown_url}: {first}") from None
            racing_tries += 1
            time.sleep(0.5 * racing_tries)
            continue
        outage.over()
        return storage


def open_study(spec: StudyConfig, storage: BaseStorage,
               sampler: optuna.samplers.BaseSampler | None = None) -> optuna.Study:
    """The study ``spec.name`` (created when new); one that exists with other directions is refused."""
    directions, names = [str(d) for d in spec.directions], [str(n) for n in spec.metric_names]
    study = optuna.create_study(study_name=spec.name, storage=storage, directions=directions,
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
