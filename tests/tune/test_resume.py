"""``python -m recdiff.tune`` on the embedded default at a tiny scale, interrupted mid-search (Ctrl-C, then SIGKILL) and
run again: the same study continues, no trial is lost (each interrupted one re-queued and measured again), and the
tune ends with its table and a preset that loads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from recdiff.device import describe
from recdiff.study import open_storage
from recdiff.study.storage import HEARTBEAT_ATTR
from recdiff.tune import read_preset

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SLUG = describe("cpu").slug()   # the subprocess runs on this machine's CPU
STUDY = f"tune-embedded-compose-{SLUG}-b1"
TINY = ["run.batch_size=1", "run.threads=1", "benchmark.limit=2", "tune.holdout_limit=2", "run.speed_samples=1",
        "run.repeats=2", "tune.holdout_speed_samples=2", "tune.holdout_repeats=2", "run.warmup=0", "run.n_traces=0",
        "study.n_trials=3", "study.heartbeat_interval=1", "study.grace_period=30"]


def tune_args(tmp_path: Path) -> list[str]:
    return [sys.executable, "-m", "recdiff.tune", *TINY, f"study.storage={tmp_path}/j.log",
            f"study.artifact_dir={tmp_path}/art", f"tune.output_dir={tmp_path}/out",
            f"tune.preset_dir={tmp_path}/presets"]


def trials(tmp_path: Path) -> list[optuna.trial.FrozenTrial]:
    try:
        return optuna.load_study(study_name=STUDY, storage=open_storage(f"{tmp_path}/j.log")).get_trials()
    except (KeyError, ValueError):   # not created yet
        return []


def interrupt_mid_search(tmp_path: Path, sig: int) -> subprocess.CompletedProcess:
    """Start the tune; once its search has measured a trial and measures the next (its heartbeats have begun), send
    ``sig``."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(tune_args(tmp_path), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        now = trials(tmp_path)
        running = [t for t in now if t.state == TrialState.RUNNING and HEARTBEAT_ATTR in t.system_attrs]
        if any(t.state == TrialState.COMPLETE for t in now) and running:
            time.sleep(0.5)   # past the claim's own writes: the main thread measures
            proc.send_signal(sig)
            break
        time.sleep(0.2)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.slow
def test_killed_mid_search_and_run_again_it_continues_and_loses_no_trial(tmp_path):
    stopped = interrupt_mid_search(tmp_path, signal.SIGINT)                    # Ctrl-C
    assert stopped.returncode == 130, stopped.stderr[-2000:]
    assert stopped.stderr.strip().splitlines()[-1].startswith("error: interrupted: the running trial is re-queued")
    (interrupted,) = [t for t in trials(tmp_path) if t.state == TrialState.FAIL]
    assert interrupted.user_attrs["fail_kind"] == "interrupted"

    killed = interrupt_mid_search(tmp_path, signal.SIGKILL)                     # no handler runs
    assert killed.returncode == -signal.SIGKILL
    assert any(t.state == TrialState.RUNNING for t in trials(tmp_path))

    done = subprocess.run(tune_args(tmp_path), cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    final = trials(tmp_path)
    lost = [t for t in final if t.state == TrialState.FAIL]
    assert {t.user_attrs["fail_kind"] for t in lost} == {"interrupted", "worker_died"}
    for t in lost:   # each interrupted trial measured again with its own settings, by a retry (Optuna's link)
        again = [r for r in final if r.params == t.params and r.number > t.number and r not in lost]
        assert again and again[0].system_attrs["failed_trial"] == t.system_attrs.get("failed_trial", t.number)
    counted = [t for t in final if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
               or t.user_attrs.get("fail_kind") == "timeout"]
    assert len(counted) == 3 and not any(t.state == TrialState.RUNNING for t in final)
    assert "speed-up vs static r=32 [95% CI]" in done.stdout and "paper defaults" in done.stdout
    preset = read_preset(tmp_path / "presets" / f"embedded-{SLUG}-b1.yaml")
    assert preset.preset.study == STUDY and preset.preset.timing_batch == 1
    assert (preset.preset.held_out_speed_samples, preset.preset.held_out_repeats) == (2, 2)
