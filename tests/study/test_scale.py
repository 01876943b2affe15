"""Many workers on one study (issue 35): killed joblib workers, eight workers on a sixteen-configuration grid, and each
local worker's share of the cores. Sweeps in subprocesses on the smallest workload (TINY)."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest
from optuna.trial import TrialState

from recdiff.study.resources import cores, local_workers, thread_budget
from tests.faults import fault_args
from tests.sweep_helpers import TINY, exactly_once, load, requires_fixture, run_sweep

pytestmark = pytest.mark.slow

JOBLIB = ["hydra/launcher=joblib"]


def where(tmp: Path, name: str) -> list[str]:
    return [f"study.name={name}", f"study.storage={tmp}/journal.log", f"study.artifact_dir={tmp}/artifacts"]


def measured(sweep_dir: Path) -> Counter:
    """How often each configuration was measured by a sweep: its result.json files that hold a measurement."""
    done = Counter()
    for f in sweep_dir.rglob("result.json"):
        r = json.loads(f.read_text())
        if r["state"] == "COMPLETE" and not r.get("skipped_duplicate") and "reused_from" not in r["user_attrs"]:
            done[r["user_attrs"]["config_hash"]] += 1
    return done


@pytest.mark.slow
@requires_fixture
def test_killed_joblib_workers_the_same_command_again_finishes_the_grid(tmp_path):
    """Four joblib workers on one journal, eight configurations; two workers SIGKILL themselves mid-trial (joblib then
    ends the other two). The sweep stops non-zero without a table; the killed trials are FAIL with a reason and
    re-queued at once (their processes are gone from this machine); the same command again, right away, finishes."""
    grid = ["-m", *JOBLIB, "hydra.launcher.n_jobs=4", "sampler=static", "sampler.r=1,2,3,4,5,6,7,8", *TINY,
            *where(tmp_path, "killed"), "study.grace_period=600"]   # only the claimants' processes tell they died
    first = run_sweep([*grid, f"hydra.sweep.dir={tmp_path}/one", *fault_args(None, "kill", None, "kill", jobs=False)],
                      check=False, timeout=600)
    assert first.returncode == 1, first.stderr[-3000:]
    assert first.stderr.strip().splitlines()[-1].startswith("error: a joblib worker process died (exit codes ")
    assert "relative to Static AR (r=32)" not in first.stdout and "Traceback" not in first.stderr
    study = load(str(tmp_path / "journal.log"), "killed")
    killed = study.get_trials(states=(TrialState.FAIL,))
    assert killed and not study.get_trials(states=(TrialState.RUNNING,))
    for t in killed:
        assert t.user_attrs["fail_kind"] == "worker_died"
        assert (t.user_attrs["fail_reason"].startswith("worker died (process ")
                and "is gone)" in t.user_attrs["fail_reason"])

    again = run_sweep([*grid, f"hydra.sweep.dir={tmp_path}/two"], timeout=600)
    assert "relative to Static AR (r=32)" in again.stdout
    study = load(str(tmp_path / "journal.log"), "killed")
    done = exactly_once(study)
    assert sorted(t.params["r"] for t in done.values()) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert all(t.state == TrialState.FAIL for t in study.get_trials() if t.user_attrs["config_hash"] not in done
               or t.number != done[t.user_attrs["config_hash"]].number)
    retried = {t.system_attrs["failed_trial"] for t in done.values() if "failed_trial" in t.system_attrs}
    assert retried == {t.number for t in killed}                      # each killed trial ran again, once
    assert measured(tmp_path / "one") + measured(tmp_path / "two") == Counter(done.keys())


@pytest.mark.slow
@requires_fixture
def test_eight_workers_run_twelve_configurations_exactly_once(tmp_path):
    """Eight joblib workers start together on one journal: eight grid configurations (static r=1..8) and the
    baselines every job owes, two of which (static r=4, r=8) are grid configurations too: twelve configurations,
    most wanted by several workers at once. Each is claimed before a model loads: every one COMPLETE once, none
    measured twice."""
    run_sweep(["-m", *JOBLIB, "hydra.launcher.n_jobs=8", "sampler=static",
               f"sampler.r={','.join(map(str, range(1, 9)))}",
               *TINY, "study.baselines=true", *where(tmp_path, "many"), f"hydra.sweep.dir={tmp_path}/sweep"],
              timeout=600)
    done = exactly_once(load(str(tmp_path / "journal.log"), "many"))
    assert sorted((t.params["sampler"], t.params["r"]) for t in done.values()) == sorted(
        [("static", r) for r in [*range(1, 9), 32]] + [("adaptive", 32), ("speculative", 32), ("loopspec", 32)])
    assert measured(tmp_path / "sweep") == Counter(done.keys())         # each measured by exactly one worker
    # the launcher's own record: the study named in the sweep folder, one result per job in its numbered folder
    assert json.loads((tmp_path / "sweep" / "study.json").read_text())["study_name"] == "many"
    assert sorted(int(p.parent.name) for p in (tmp_path / "sweep").glob("*/result.json")) == list(range(8))


@pytest.mark.slow
@requires_fixture
@pytest.mark.skipif(cores() < 2, reason="needs two cores to stand for a 2-core machine")
def test_two_joblib_workers_on_two_cores_run_one_thread_each(tmp_path):
    two_cores = sorted(os.sched_getaffinity(0))[:2]
    run_sweep(["-m", *JOBLIB, "hydra.launcher.n_jobs=2", "sampler=static", "sampler.r=1,2", *TINY, "run.threads=null",
               "run.timing_threads=null", *where(tmp_path, "threads"), f"hydra.sweep.dir={tmp_path}/sweep"],
              timeout=600, env={"OMP_NUM_THREADS": "2"},   # the suite's cap of 1 lifted: the share is what is tested
              preexec_fn=lambda: os.sched_setaffinity(0, two_cores))
    trials = load(str(tmp_path / "journal.log"), "threads").get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    for t in trials:
        assert t.user_attrs["thread_budget"] == 1
        # timing on the budget (timing_threads null)
        assert t.user_attrs["threads"] == 1
        assert t.user_attrs["device"].endswith(", 1 threads)")               # torch's count as the trial ended
        assert t.user_attrs["config"]["run"]["threads"] is None               # the config (and its hash) unchanged


JOBLIB_LAUNCHER = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"


@pytest.mark.parametrize("threads, launcher, env, workers, budget", [
    (None, {"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}, {}, 1, 16),
    (None, {"_target_": JOBLIB_LAUNCHER, "n_jobs": 4}, {}, 4, 4),
    (None, {"_target_": JOBLIB_LAUNCHER, "n_jobs": -1}, {}, 16, 1),     # joblib's default: one worker per core
    (None, {"_target_": JOBLIB_LAUNCHER, "n_jobs": -3}, {}, 14, 1),
    (None, {"_target_": JOBLIB_LAUNCHER, "n_jobs": 32}, {}, 32, 1),
    (None, {"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"},
     {"SLURM_CPUS_PER_TASK": "8"}, 1, 8),                                # the SLURM job's CPUs
    (3, {"_target_": JOBLIB_LAUNCHER, "n_jobs": 16}, {}, 16, 3),          # run.threads set: as set
    (None, {"_target_": JOBLIB_LAUNCHER, "n_jobs": 4}, {"OMP_NUM_THREADS": "2"}, 4, 2),   # capped by OMP_NUM_THREADS
    (None, {"_target_": JOBLIB_LAUNCHER, "n_jobs": 4}, {"OMP_NUM_THREADS": "8"}, 4, 4),   # a cap, never a raise
    (None, {}, {"OMP_NUM_THREADS": "1"}, 1, 1),
    (None, {}, {"OMP_NUM_THREADS": "0"}, 1, 16),                          # not a positive count: no cap
    (None, {}, {"OMP_NUM_THREADS": "four"}, 1, 16),
    (3, {}, {"OMP_NUM_THREADS": "1"}, 1, 3),                              # run.threads set: as set
])
def test_the_thread_budget_is_the_cores_divided_by_the_local_workers(monkeypatch, threads, launcher, env, workers,
                                                                      budget):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert cores(env) == int(env.get("SLURM_CPUS_PER_TASK", 16))
    assert local_workers(launcher, 16) == workers
    assert thread_budget(threads, launcher, env) == budget
