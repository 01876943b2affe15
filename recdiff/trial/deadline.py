"""A trial's time limit (``run.timeout_s``; a tune's search trials: ``tune.trial_timeout_x``)."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from types import FrameType
from typing import Callable, Iterator

# An alarm that lands inside an import waits this long and looks again: an exception raised there leaves the half-run
# module's submodules bound to a parent that never finishes (a trial cut during scipy.stats' first import leaves
# every later bootstrap in the process failing on a missing attribute). An import still running IMPORT_GRACE_S past
# the limit is cut all the same: the limit stays a limit.
RETRY_S = 0.05
IMPORT_GRACE_S = 30.0


class TrialTimeout(Exception):
    """The trial ran longer than ``run.timeout_s``."""


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[Callable[[], None]]:
    """Raise :class:`TrialTimeout` after ``seconds``: by SIGALRM in the main thread (interrupts a long
    generate call, though not an import: it is raised once the import is over), and by the returned ``check()``
    between samples everywhere."""
    if not seconds:
        yield lambda: None
        return
    end = time.monotonic() + seconds

    def check() -> None:
        if time.monotonic() > end:
            raise TrialTimeout(f"timeout: trial ran longer than {seconds:g} s")

    use_alarm = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    if use_alarm:
        def on_alarm(signum: int, frame: FrameType | None) -> None:
            if importing(frame) and time.monotonic() < end + IMPORT_GRACE_S:
                signal.setitimer(signal.ITIMER_REAL, RETRY_S)
                return
            raise TrialTimeout(f"timeout: trial ran longer than {seconds:g} s")

        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield check
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def importing(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside an import (importlib's own frames below it)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False
