"""Each worker's share of the machine: torch's CPU threads per job (``run.threads``).

Workers on one machine (Hydra's joblib launcher) that each start torch's default of one thread per core
oversubscribe the cores, and every trial slows down by far more than its share (docs/sweeps.md, "Threads"). So
``run.threads: null`` is this job's share: the cores it may use (its CPU affinity; under SLURM the job's CPUs)
divided by the workers the launcher runs on the machine at once (joblib's ``n_jobs``; a SLURM job is one worker), at
least one, and at most ``OMP_NUM_THREADS`` where that is set (the usual cap on a process's threads: a caller that
shares the cores with other work says so with it, and one more thread than it allows only spins).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any


def cores(env: Mapping[str, str] = os.environ) -> int:
    """The cores this process may use: the SLURM job's CPUs, else its CPU affinity (cgroups, taskset)."""
    slurm = env.get("SLURM_CPUS_PER_TASK", "")
    if slurm.isdigit() and int(slurm) > 0:
        return int(slurm)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


def local_workers(launcher: Mapping[str, Any] | None, n_cores: int) -> int:
    """Workers the launcher runs on this machine at once: joblib's ``n_jobs`` (negative as joblib reads it: -1 = one
    per core), else one (the basic launcher, a SLURM job)."""
    launcher = launcher or {}
    if not str(launcher.get("_target_", "")).endswith("JoblibLauncher"):
        return 1
    n = int(launcher.get("n_jobs") or -1)
    return max(1, n if n > 0 else n_cores + 1 + n)


def thread_budget(threads: int | None, launcher: Mapping[str, Any] | None,
                  env: Mapping[str, str] = os.environ) -> int:
    """``run.threads`` when set, else this job's share of the cores, capped by ``OMP_NUM_THREADS`` when it is set."""
    if threads is not None:
        return threads
    n = cores(env)
    share = max(1, n // local_workers(launcher, n))
    cap = env.get("OMP_NUM_THREADS", "").strip()
    return min(share, int(cap)) if cap.isdigit() and int(cap) > 0 else share
