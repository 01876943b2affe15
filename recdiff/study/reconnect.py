"""A database storage that rides out a restarted server.

SQLAlchemy's ``pool_pre_ping`` replaces a pooled connection that the server closed, but a statement that meets the
server while it is down fails all the same (Optuna reports it as ``StorageInternalError``). A
:class:`ReconnectingRDBStorage` tries each storage call that failed for its connection again, with backoff, for up to
``patience_s`` seconds (the study's grace period: a worker that cannot reach the storage for longer counts as dead to
the others anyway), then stops the sweep with one :class:`~recdiff.errors.SweepStopped` line naming the storage.

Every storage call is retried whole. A connection lost while a write commits may, rarely, leave that write done
twice (a restart aborts open transactions, so this needs the connection lost between the commit and its reply).
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any, Callable

import sqlalchemy.exc
from optuna.storages import BaseStorage, RDBStorage

from recdiff.errors import SweepStopped

log = logging.getLogger("recdiff.study")
# RDBStorage's calls that talk to the database: the storage API, and heartbeats.
CALLS = sorted({n for n in dir(BaseStorage) if not n.startswith("_")} | {"record_heartbeat", "_get_stale_trial_ids"})


def shown(url: str) -> str:
    """The URL as a user may see it (no password)."""
    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except sqlalchemy.exc.ArgumentError:
        return url


def lost_connection(err: BaseException) -> sqlalchemy.exc.DBAPIError | None:
    """The driver's error in ``err``'s chain when it says the connection is gone (server down, restarted)."""
    seen: list[BaseException] = []
    e: BaseException | None = err
    while e is not None and e not in seen:
        if isinstance(e, sqlalchemy.exc.DBAPIError) and (
                e.connection_invalidated or isinstance(e, (sqlalchemy.exc.OperationalError,
                                                           sqlalchemy.exc.InterfaceError))):
            return e
        seen.append(e)
        e = e.__cause__ or e.__context__
    return None


class ReconnectingRDBStorage(RDBStorage):
    """:class:`~optuna.storages.RDBStorage` whose calls wait out a lost connection for ``patience_s`` seconds."""

    def __init__(self, url: str, *, patience_s: float, shown_url: str, **kwargs: Any) -> None:
        self._patience_s, self._shown_url = patience_s, shown_url
        super().__init__(url, **kwargs)


def _patient(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: ReconnectingRDBStorage, *args: Any, **kwargs: Any) -> Any:
        deadline, delay = None, 0.25
        while True:
            try:
                result = method(self, *args, **kwargs)
            except Exception as err:
                cause = lost_connection(err)
                if cause is None:
                    raise
                why = str(cause.orig or cause).strip().splitlines()[0]
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self._patience_s
                    log.warning("storage %s: connection lost (%s); trying again for up to %g s", self._shown_url, why,
                                self._patience_s)
                if now >= deadline:
                    raise SweepStopped(
                        f"storage {self._shown_url} unreachable for {self._patience_s:g} s ({why}): the sweep stopped; "
                        "what it recorded is kept: run the same command again once the storage answers") from None
                time.sleep(min(delay, deadline - now))
                delay = min(2 * delay, 2.0)
                continue
            if deadline is not None:
                log.warning("storage %s: reconnected", self._shown_url)
            return result

    return call


for _name in CALLS:
    setattr(ReconnectingRDBStorage, _name, _patient(getattr(RDBStorage, _name)))
