"""SIGTERM ends a sweep as Ctrl-C does: a ``KeyboardInterrupt``, so that the running trial is FAIL (``interrupted``)
and re-queued (:func:`~recdiff.study.storage.holding`) and the sweep exits 130.

Installed where a sweep's processes start: by ``sweep.py`` before Hydra runs (it waits there for the launcher's
workers) and by every job (:func:`recdiff.study.job.run_job`), which may run in a process of its own: a joblib worker,
or a SLURM job, whose runner would otherwise only log the signal that ``scancel`` sends.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def interrupt_on_sigterm() -> None:
    """Install the handler; only the main thread may, so elsewhere (a launcher's thread) nothing is changed."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
