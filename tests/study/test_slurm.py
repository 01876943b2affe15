"""``hydra/launcher=slurm`` for real: a one-node SLURM cluster on this machine (tests/study/slurm_cluster.py), a grid
sweep submitted through Hydra's submitit launcher, and the failure semantics of docs/sweeps.md when a job is cancelled.

The cluster's tests are skipped, with the reason, only where slurmctld cannot start: without root.
"""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest
from optuna.trial import TrialState

from tests.study.slurm_cluster import Cluster, ensure_installed, unavailable
from tests.sweep_helpers import REPO, load, popen_sweep, run_sweep

pytestmark = pytest.mark.slow

needs_root = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))

# the cluster's one node: 1 CPU, 1 GB and no GPU per job (a real cluster: README, "SLURM")
LAUNCHER = ["hydra/launcher=slurm", "hydra.launcher.partition=debug", "hydra.launcher.gpus_per_node=null",
            "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1", "hydra.launcher.timeout_min=20"]
# the embedded default (model and benchmark) on a small slice
SMALL = ["benchmark.limit=4", "run.speed_samples=1", "run.threads=1", "run.progress=false", "study.baselines=false"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    ensure_installed()
    c = Cluster(tmp_path_factory.mktemp("slurm"))
    c.env["PYTHONPATH"] = str(REPO)     # the jobs import this checkout's recdiff
    try:
        c.start()
        yield c
    finally:
        c.stop()


def sweep_args(tmp_path: Path, name: str, *overrides: str) -> list[str]:
    return ["-m", *LAUNCHER, *SMALL, *overrides, f"study.storage={tmp_path / 'journal.log'}",
            f"study.artifact_dir={tmp_path / 'artifacts'}", f"hydra.sweep.dir={tmp_path / name}"]


def study_of(tmp_path: Path, sweep: str):
    """The study a sweep wrote to (its name follows the embedded default's benchmark)."""
    return load(str(tmp_path / "journal.log"), json.loads((tmp_path / sweep / "study.json").read_text())["study_name"])


@needs_root
def test_a_grid_sweep_runs_as_slurm_jobs(cluster, tmp_path):
    proc = run_sweep(sweep_args(tmp_path, "grid", "sampler.r_inner=1,2"), env=cluster.env, timeout=900)
    study = study_of(tmp_path, "grid")
    assert sorted((t.state, t.params["r_inner"]) for t in study.trials) == [(TrialState.COMPLETE, 1),
                                                                            (TrialState.COMPLETE, 2)]
    # through sbatch: sacct holds both array tasks, and submitit's logs their job ids
    cluster.drain()
    jobs = [j for j in cluster.accounting() if j["JobName"] == "sweep"]
    assert sorted(j["JobID"].split("_")[1] for j in jobs) == ["0", "1"], jobs
    assert {j["State"] for j in jobs} == {"COMPLETED"}, jobs
    logs = sorted((tmp_path / "grid" / ".submitit").rglob("*_log.out"))
    assert len(logs) == 2 and all("Starting with JobEnvironment(job_id=" in f.read_text() for f in logs)
    assert "Submitit 'slurm' sweep output dir" in proc.stdout + proc.stderr


# a trial that runs long enough to be cancelled while it runs (sixteen problems, four of them timed alone)
LONGER = ["sampler.r_inner=8", "benchmark.limit=16", "run.speed_samples=4"]


@needs_root
def test_a_cancelled_job_leaves_a_fail_trial_that_the_next_sweep_requeues(cluster, tmp_path):
    args = sweep_args(tmp_path, "cancelled", *LONGER)
    sweep = popen_sweep(args, env=cluster.env, log=tmp_path / "cancelled.log")
    try:
        running = None
        deadline = time.time() + 600
        while running is None and time.time() < deadline and sweep.poll() is None:
            if (tmp_path / "cancelled" / "study.json").exists():
                running = next(iter(study_of(tmp_path, "cancelled").get_trials(states=(TrialState.RUNNING,))), None)
            time.sleep(0.2)
        assert running is not None, (tmp_path / "cancelled.log").read_text()[-3000:]
        (job,) = cluster.run("squeue", "-h", "-o", "%i").stdout.split()
        cluster.run("scancel", job)
        sweep.wait(300)   # submitit learns from sacct that the job was cancelled
    finally:
        if sweep.poll() is None:
            sweep.send_signal(signal.SIGTERM)
            sweep.wait(60)
    log = (tmp_path / "cancelled.log").read_text()
    assert sweep.returncode == 130, log[-3000:]
    assert re.fullmatch(r"error: SLURM job \S+ \(task 0\) was cancelled \(CANCELLED by 0\): its trial is FAIL "
                        r"\(interrupted\) and the next sweep on the study re-queues it", log.strip().splitlines()[-1])
    cluster.drain()
    failed = study_of(tmp_path, "cancelled").trials[running.number]
    assert failed.state == TrialState.FAIL and failed.user_attrs["fail_kind"] == "interrupted"
    assert {"JobID": job, "JobName": "sweep", "State": "CANCELLED by 0", "ExitCode": "0:0"} in cluster.accounting()

    run_sweep(sweep_args(tmp_path, "again", *LONGER), env=cluster.env, timeout=900)
    study = study_of(tmp_path, "again")
    done = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(done) == 1 and done[0].params == failed.params
    assert done[0].system_attrs.get("failed_trial") == failed.number      # the retry of the cancelled trial
    assert not study.get_trials(states=(TrialState.RUNNING, TrialState.WAITING))


def test_slurm_not_reachable_is_one_line(tmp_path):
    """A cluster's configuration without its controller running: nothing is submitted or recorded."""
    down = Cluster(tmp_path / "down")
    down.write()
    proc = run_sweep(sweep_args(tmp_path, "grid", "sampler.r_inner=1,2"), env=down.env, check=False, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("error: hydra/launcher=slurm: SLURM not reachable: ")
    assert "is DOWN" in lines[0] or "no sbatch/scontrol on PATH" in lines[0]   # without SLURM's commands
    assert not (tmp_path / "journal.log").exists() and not (tmp_path / "grid" / ".submitit").exists()
