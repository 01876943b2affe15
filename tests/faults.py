"""Faults injected into a sweep's trials, for the tests of the failure handling; production code has no such hook.

:func:`fault_args` adds a Hydra callback to a sweep's command line (``hydra.callbacks`` are not part of a trial's
configuration): job i of the sweep gets ``faults[i]``, raised (or slept, or killed) where the trial's first decoding
pass starts, inside the trial's deadline and memory watch, as a real failure there would be.

Faults of the world around a trial run commands the test gives in the environment: ``db_restart`` stops the storage's
database server (``RECDIFF_FAULT_DB_STOP``), waits past a heartbeat and starts it again (``RECDIFF_FAULT_DB_START``),
mid-trial and again between trials; ``db_down`` stops it mid-trial; ``fill_disk`` fills the filesystem of the folder
``RECDIFF_FAULT_FILL`` mid-trial (or, where that names a file, limits the sweep's file size to a little more than
that file's: where no small filesystem can be mounted, the file stands for a full disk). ``hang`` touches
``RECDIFF_FAULT_READY`` (when set) once it hangs. ``reference`` gives the trial a reference whose every decoding call
fails (settings the sampler refuses), as a reference that cannot be timed would.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

FAULTS = ("error", "oom", "hang", "kill", "invalid", "db_restart", "db_down", "fill_disk", "reference")


def _run(env: str) -> None:
    import subprocess

    subprocess.run(os.environ[env], shell=True, check=True, capture_output=True, timeout=120)


def db_restart() -> None:
    _run("RECDIFF_FAULT_DB_STOP")
    time.sleep(2.5)   # past a heartbeat (study.heartbeat_interval=1): a write meets the server down
    _run("RECDIFF_FAULT_DB_START")


def fill_disk(target: str) -> None:
    """Write a file until the filesystem of the folder ``target`` has no byte left; for a file ``target``, limit
    this process's file size to 200 bytes past its size (its next large write is cut short, then fails)."""
    if os.path.isfile(target):
        import resource

        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(target) + 200, hard))
        return
    with open(os.path.join(target, "filler"), "wb", buffering=0) as f:
        for block in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    f.write(b"\0" * block)
            except OSError:
                continue


def inject(fault: str | None) -> None:
    import torch

    from recdiff.errors import RecdiffError

    if fault == "error":
        raise RuntimeError("injected error")
    if fault == "oom":
        raise torch.OutOfMemoryError("injected out-of-memory")
    if fault == "invalid":
        raise RecdiffError("injected invalid combination")
    if fault == "db_restart":
        db_restart()
    if fault == "db_down":
        _run("RECDIFF_FAULT_DB_STOP")
    if fault == "fill_disk":
        fill_disk(os.environ["RECDIFF_FAULT_FILL"])
    if fault == "hang":   # the trial's timeout (SIGALRM), a signal or a SIGKILL ends it
        if os.environ.get("RECDIFF_FAULT_READY"):
            open(os.environ["RECDIFF_FAULT_READY"], "w").close()
        while True:
            time.sleep(0.05)
    if fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)


class InjectFault(Callback):
    def __init__(self, faults: list[str | None]) -> None:
        unknown = set(faults) - {*FAULTS, None}
        assert not unknown, f"unknown faults {unknown}"
        self.faults = list(faults)
        self.original: Any = None

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra.core.hydra_config import HydraConfig

        from recdiff.study import record
        from recdiff.trial import measure

        num = OmegaConf.select(HydraConfig.get(), "job.num", default=0)   # a single run has no job number
        fault = self.faults[int(num) % len(self.faults)]
        self.original = original = measure.accuracy_pass
        self.log_trial = log_trial = record.log_trial
        self.original_reference = measure.reference_gen
        if fault == "reference":
            measure.reference_gen = lambda trial, base: {**base, "sampler": "static", "r": 0}
            fault = None

        def faulty(*args: Any, **kw: Any) -> Any:
            inject(fault)
            return original(*args, **kw)

        def between_trials(*args: Any, **kw: Any) -> Any:   # a trial is recorded, the next one not yet claimed
            log_trial(*args, **kw)
            if fault == "db_restart":
                db_restart()

        measure.accuracy_pass = faulty
        record.log_trial = between_trials

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        from recdiff.study import record
        from recdiff.trial import measure

        measure.accuracy_pass = self.original
        measure.reference_gen = self.original_reference
        record.log_trial = self.log_trial


def fault_args(*faults: str | None, jobs: bool = True) -> list[str]:
    """Overrides that give job i of a sweep ``faults[i % len(faults)]`` (None: no fault). With ``jobs``, as many jobs
    as faults: ``-m worker=0,1,...`` runs the same configuration once per value (``worker`` is not part of it);
    without, the sweep's own jobs take them in turn."""
    listed = ",".join("null" if f is None else f for f in faults)
    args = ["+hydra.callbacks.inject_fault._target_=tests.faults.InjectFault",
            f"+hydra.callbacks.inject_fault.faults=[{listed}]"]
    return args + ([f"worker={','.join(map(str, range(len(faults))))}"] if jobs and len(faults) > 1 else [])
