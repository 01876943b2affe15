"""Faults injected into a sweep's trials, for the tests of the failure handling; production code has no such hook.

:func:`fault_args` adds a Hydra callback to a sweep's command line (``hydra.callbacks`` are not part of a trial's
configuration): job i of the sweep gets ``faults[i]``, raised (or slept, or killed) where the trial's first decoding
pass starts, inside the trial's deadline and memory watch, as a real failure there would be.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

FAULTS = ("error", "oom", "hang", "kill", "invalid")


def inject(fault: str | None) -> None:
    import torch

    from recdiff.errors import RecdiffError

    if fault == "error":
        raise RuntimeError("injected error")
    if fault == "oom":
        raise torch.OutOfMemoryError("injected out-of-memory")
    if fault == "invalid":
        raise RecdiffError("injected invalid combination")
    if fault == "hang":   # the trial's timeout (SIGALRM) or a SIGKILL ends it
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

        from recdiff.trial import measure

        num = OmegaConf.select(HydraConfig.get(), "job.num", default=0)   # a single run has no job number
        fault = self.faults[int(num) % len(self.faults)]
        self.original = original = measure.accuracy_pass

        def faulty(*args: Any, **kw: Any) -> Any:
            inject(fault)
            return original(*args, **kw)

        measure.accuracy_pass = faulty

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        from recdiff.trial import measure

        measure.accuracy_pass = self.original


def fault_args(*faults: str | None) -> list[str]:
    """Overrides that give job i of a sweep ``faults[i]`` (None: no fault). A multirun with several faults needs as
    many jobs: ``-m worker=0,1,...`` runs the same configuration once per value (``worker`` is not part of it)."""
    listed = ",".join("null" if f is None else f for f in faults)
    args = ["+hydra.callbacks.inject_fault._target_=tests.sweep.faults.InjectFault",
            f"+hydra.callbacks.inject_fault.faults=[{listed}]"]
    return args + ([f"worker={','.join(map(str, range(len(faults))))}"] if len(faults) > 1 else [])
