"""SIGTERM ends a sweep as Ctrl-C does: a ``KeyboardInterrupt``, so that the running trial is FAIL (``interrupted``)
and re-queued (:func:`~recdiff.study.storage.holding`) and the sweep exits 130.

Installed where a sweep's processes start: by ``sweep.py`` before Hydra runs (it waits there for the launcher's
workers) and by every job (:func:`recdiff.study.job.run_job`), which may run in a process of its own: a joblib worker,
or a SLURM job, whose runner would otherwise only log the signal that ``scancel`` sends.

An interrupt that lands while Python runs a finalizer or a weak reference's callback cannot leave it: Python prints it
as "Exception ignored" and carries on, as if it had never come. Such an interrupt is delivered again, to the main
thread, a moment later (no traceback, and the sweep stops as it should). An error raised while a library unwinds
from an interrupt (its cleanup failing half-way) is the interrupt too (:func:`interrupted`): exit 130, never the
code of bad input.
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
from types import FrameType
from typing import Any

REDELIVER_S = 0.05   # a finalizer or callback is over by then


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _redeliver(hook: Any) -> Any:
    def unraisable(info: Any) -> None:
        if isinstance(info.exc_value, KeyboardInterrupt):   # again, once the callback has returned
            again = threading.Timer(REDELIVER_S, _thread.interrupt_main)
            again.daemon = True
            again.start()
            return
        hook(info)

    unraisable.redelivers = True
    return unraisable


def interrupted(exc: BaseException) -> bool:
    """True when ``exc`` is, or was raised while handling, an interrupt (a library's cleanup that failed on the way
    out of a KeyboardInterrupt replaces it with its own error: the sweep was interrupted all the same)."""
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.append(e)
        e = e.__cause__ or e.__context__
    return False


def interrupt_on_sigterm() -> None:
    """Install the handler; only the main thread may, so elsewhere (a launcher's thread) nothing is changed."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
        if not getattr(sys.unraisablehook, "redelivers", False):
            sys.unraisablehook = _redeliver(sys.unraisablehook)
