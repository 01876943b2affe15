"""The SLURM launcher's two ends (``hydra/launcher=slurm``): is a controller there before anything is submitted, and
what a job that ended without a result means for the sweep.

A Hydra callback (``conf/hydra/default.yaml``) asks ``scontrol ping`` once the multirun starts and before the launcher
calls ``sbatch``; a machine without SLURM, or a controller that does not answer, ends the sweep with one line
``error: hydra/launcher=slurm: SLURM not reachable: ...`` and exit code 2, with nothing submitted or recorded
(Hydra would only warn about an exception, so the callback prints the line and exits itself).

A job that ends without a result (``scancel``, a node failure, the time limit) reaches the sweep as submitit's
``UncompletedJobError``, which :func:`job_failure` turns into one line: a cancelled job was interrupted (its trial is
FAIL and re-queued, exit code 130, as an interrupted sweep on one machine); any other state leaves its trial to the
heartbeat rules (exit code 1). Either way the next sweep on the study runs the trial again.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from recdiff.errors import RecdiffError


def check_slurm() -> None:
    """One :class:`RecdiffError` line unless ``sbatch`` is installed and the controller answers."""
    if shutil.which("sbatch") is None or shutil.which("scontrol") is None:
        raise RecdiffError("hydra/launcher=slurm: SLURM not reachable: no sbatch/scontrol on PATH (run the sweep "
                           "where SLURM's commands are, e.g. a login node)")
    try:
        proc = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise RecdiffError("hydra/launcher=slurm: SLURM not reachable: scontrol ping did not answer in 60 s") from None
    lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    if proc.returncode != 0 or not any(ln.endswith("is UP") for ln in lines):
        why = next((ln for ln in lines if "fatal" in ln), lines[0] if lines else "scontrol ping failed")
        raise RecdiffError(f"hydra/launcher=slurm: SLURM not reachable: {why}")


class SlurmReachable(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        target = str(OmegaConf.select(config, "hydra.launcher._target_", default="") or "")
        if not target.endswith(".SlurmLauncher"):
            return
        try:
            check_slurm()
        except RecdiffError as err:   # Hydra turns a callback's exception into a warning: end the sweep here
            print(f"error: {err}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None


def job_failure(exc: BaseException) -> tuple[str, int] | None:
    """(one line, exit code) for submitit's report of a job that ended without a result; None for anything else."""
    if type(exc).__name__ != "UncompletedJobError" or not type(exc).__module__.startswith("submitit"):
        return None
    text = str(exc)
    job = re.search(r"Job (\S+) \(task: (\S+)\)", text)
    state = re.search(r"\(state: ([^)]*)\)", text)
    what = f"SLURM job {job.group(1)} (task {job.group(2)})" if job else "a SLURM job"
    state_text = state.group(1) if state else "unknown state"
    if state_text.startswith("CANCELLED"):
        return (f"{what} was cancelled ({state_text}): its trial is FAIL (interrupted) and the next sweep on the "
                "study re-queues it", 130)
    return (f"{what} ended without a result ({state_text}): the next sweep on the study runs its trial again once "
            "its heartbeat is stale", 1)
