"""A database storage that rides out a restarted server.

SQLAlchemy's ``pool_pre_ping`` replaces a pooled connection that the server closed, but a statement that meets the
server while it is down fails all the same (Optuna reports it as ``StorageInternalError``). A
:class:`ReconnectingRDBStorage` tries each storage call that failed for its connection again, with backoff, for up to
``patience_s`` seconds (the study's grace period: a worker that cannot reach the storage for longer counts as dead to
the others anyway), then stops the sweep with one :class:`~recdiff.errors.SweepStopped` line naming the storage
(:class:`Outage`; opening the storage waits the same way, :func:`recdiff.study.connect.open_storage`). The calls
include those that Optuna's cache in front of a database storage makes (``_create_new_trial``, ``_get_trials``, ...).

Every storage call is retried whole. A connection lost while a write commits may, rarely, leave that write done
twice (a restart aborts open transactions, so this needs the connection lost between the commit and its reply); the
end of a claimed trial (:meth:`ReconnectingRDBStorage.finish_held`) knows its own write when it meets it again.
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import time
from collections.abc import Sequence
from typing import Any, Callable

import sqlalchemy.exc
from optuna.storages import BaseStorage, RDBStorage
from optuna.trial import TrialState

from recdiff.errors import SweepStopped

log = logging.getLogger("recdiff.study")
# RDBStorage's calls that talk to the database: the storage API, heartbeats, and what Optuna's cache calls.
CALLS = sorted({n for n in dir(BaseStorage) if not n.startswith("_")} | {
    "record_heartbeat", "_get_stale_trial_ids", "_create_new_trial", "_set_trial_param", "_get_trials",
    "_get_best_trial_id"})
ENDED_ATTR = "recdiff:ended"   # who ended a claimed trial (one finish_held call): tells its own write on a retry
# A server that answers, and refuses for good: bad input, not an outage (the driver's words).
REFUSED = ("authentication failed", "does not exist", "no pg_hba.conf entry", "could not translate host name",
           "Name or service not known", "Access denied", "Unknown database", "invalid dsn",
           "unable to open database file")


def shown(url: str) -> str:
    """The URL as a user may see it (no password)."""
    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except sqlalchemy.exc.ArgumentError:
        return url


def lost_connection(err: BaseException) -> sqlalchemy.exc.DBAPIError | None:
    """The driver's error in ``err``'s chain when it says the connection is gone (server down, restarting, shutting
    down); None for anything else, and for a server that refuses the connection for good (a wrong password or
    database name)."""
    seen: list[BaseException] = []
    e: BaseException | None = err
    while e is not None and e not in seen and not isinstance(e, SweepStopped):   # an inner call gave up: so do we
        if isinstance(e, sqlalchemy.exc.DBAPIError) and (
                e.connection_invalidated or isinstance(e, (sqlalchemy.exc.OperationalError,
                                                           sqlalchemy.exc.InterfaceError))):
            return None if any(r in str(e.orig or e) for r in REFUSED) else e
        seen.append(e)
        e = e.__cause__ or e.__context__
    return None


class Outage:
    """Waits out a lost connection: :meth:`wait` sleeps (with backoff) while the outage is younger than
    ``patience_s``, logging its start; past it, one :class:`SweepStopped` line naming the storage."""

    def __init__(self, shown_url: str, patience_s: float) -> None:
        self.shown_url, self.patience_s = shown_url, patience_s
        self.deadline: float | None = None
        self.delay = 0.25

    def wait(self, err: BaseException) -> None:
        """Re-raises ``err`` unless it is a lost connection."""
        cause = lost_connection(err)
        if cause is None:
            raise err
        why = str(cause.orig or cause).strip().splitlines()[0]
        now = time.monotonic()
        if self.deadline is None:
            self.deadline = now + self.patience_s
            log.warning("storage %s: connection lost (%s); trying again for up to %g s", self.shown_url, why,
                        self.patience_s)
        if now >= self.deadline:
            raise SweepStopped(
                f"storage {self.shown_url} unreachable for {self.patience_s:g} s ({why}): the sweep stopped; "
                "what it recorded is kept: run the same command again once the storage answers") from None
        time.sleep(min(self.delay, self.deadline - now))
        self.delay = min(2 * self.delay, 2.0)

    def over(self) -> None:
        if self.deadline is not None:
            log.warning("storage %s: reconnected", self.shown_url)


class ReconnectingRDBStorage(RDBStorage):
    """:class:`~optuna.storages.RDBStorage` whose calls wait out a lost connection for ``patience_s`` seconds."""

    def __init__(self, url: str, *, patience_s: float, shown_url: str, **kwargs: Any) -> None:
        self._patience_s, self._shown_url = patience_s, shown_url
        super().__init__(url, **kwargs)

    def finish_held(self, trial_id: int, token: str | None, state: TrialState, values: Sequence[float] | None,
                    attrs: dict[str, Any]) -> bool:
        """End a claimed trial in one transaction that holds the trial's row (``SELECT ... FOR UPDATE``): its user
        attributes, values and state, only while it is RUNNING under the claim ``token``
        (:func:`recdiff.study.storage.finish_claim`). Tried again after a lost connection like every call; a retry
        that finds the trial ended by this very call (its commit's reply was lost) reports it done."""
        from recdiff.study.storage import new_token

        ended, outage = new_token(), Outage(self._shown_url, self._patience_s)
        while True:
            try:
                done = self._finish_once(trial_id, token, state, values, attrs, ended)
            except Exception as err:
                outage.wait(err)
                continue
            outage.over()
            return done

    def _finish_once(self, trial_id: int, token: str | None, state: TrialState, values: Sequence[float] | None,
                     attrs: dict[str, Any], ended: str) -> bool:
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session

        from recdiff.study.storage import CLAIM_ATTR

        def system_attr(trial: models.TrialModel, key: str, session: Any) -> Any:
            row = models.TrialSystemAttributeModel.find_by_trial_and_key(trial, key, session)
            return None if row is None else json.loads(row.value_json)

        with _create_scoped_session(self.scoped_session) as session:
            trial = models.TrialModel.find_or_raise_by_id(trial_id, session, for_update=True)
            if trial.state != TrialState.RUNNING:
                return system_attr(trial, ENDED_ATTR, session) == ended
            if system_attr(trial, CLAIM_ATTR, session) != token:
                return False
            for key, value in attrs.items():
                self._set_trial_attr_without_commit(session, models.TrialUserAttributeModel, trial_id, key, value)
            self._set_trial_attr_without_commit(session, models.TrialSystemAttributeModel, trial_id, ENDED_ATTR,
                                                ended)
            for objective, value in enumerate(values or ()):
                self._set_trial_value_without_commit(session, trial, objective, value)
            trial.state = state
            trial.datetime_complete = datetime.datetime.now()
        return True


def _patient(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: ReconnectingRDBStorage, *args: Any, **kwargs: Any) -> Any:
        outage = Outage(self._shown_url, self._patience_s)
        while True:
            try:
                result = method(self, *args, **kwargs)
            except Exception as err:
                outage.wait(err)
                continue
            outage.over()
            return result

    return call


for _name in CALLS:
    setattr(ReconnectingRDBStorage, _name, _patient(getattr(RDBStorage, _name)))
