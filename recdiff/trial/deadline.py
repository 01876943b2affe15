"""A trial's time limit (``run.timeout_s``)."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from typing import Any, Callable, Iterator


class TrialTimeout(Exception):
    """The trial ran longer than ``run.timeout_s``."""


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[Callable[[], None]]:
    """Raise :class:`TrialTimeout` after ``seconds``: by SIGALRM in the main thread (interrupts a long
    generate call), and by the returned ``check()`` between samples everywhere."""
    if not seconds:
        yield lambda: None
        return
    end = time.monotonic() + seconds

    def check() -> None:
        if time.monotonic() > end:
            raise TrialTimeout(f"timeout: trial ran longer than {seconds:g} s")

    use_alarm = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    if use_alarm:
        def on_alarm(signum: int, frame: Any) -> None:
            raise TrialTimeout(f"timeout: trial ran longer than {seconds:g} s")

        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield check
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
