"""The soak at CI size (issue 52): four workers on a sixteen-configuration grid on PostgreSQL, under kills, a pause
longer than the grace period, a server restart and one interrupt of the whole sweep followed by the same command.
Every configuration ends COMPLETE exactly once, read from the study here (not only from the soak's own table). The
schedule and the verdict over planted trials, without processes, are tested in test_soak_verdict.py (fast tier)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from optuna.trial import TrialState

from recdiff.tools.soak.schedule import KINDS
from recdiff.tools.soak.verdict import MEASURED, grid_points
from tests.sweep_helpers import REPO, exactly_once, load

pytestmark = pytest.mark.slow

BUDGET_S = 180   # about what it takes on the CI machine (2 cores); the timeout below is a hang guard only: a busy
# machine may take longer, and what the soak must show is its outcome, not its speed


@pytest.mark.slow
def test_a_soak_of_four_workers_ends_with_every_configuration_complete_exactly_once(tmp_path, postgres):
    restart = f"{postgres.stop_cmd} && sleep 1 && {postgres.start_cmd}"
    proc = subprocess.run(
        [sys.executable, "-m", "recdiff.tools.soak", "--workers", "4", "--storage", postgres.url, "--restart-cmd",
         restart, "--restarts", "1", "--kills", "2", "--pauses", "1", "--seed", "45", "--window", "20",
         "--grid", "sampler.r_inner=1,2,4,8", "sampler.beta=0,0.4",   # half the default grid: the same faults land
         "--grace-s", "10", "--heartbeat-s", "1", "--out", str(tmp_path / "soak")],
        cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=4 * BUDGET_S)
    report = json.loads((tmp_path / "soak" / "soak.json").read_text())
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    landed = {kind: sum(f["landed"] for f in report["faults"] if f["kind"] == kind) for kind in KINDS}
    assert all(n >= 1 for n in landed.values()), landed
    assert report["runs"] == 2                                   # interrupted once, then the same command again
    assert [f["held"] != [] for f in report["faults"] if f["kind"] == "pause"] == [True]   # it stopped a claim

    study = load(postgres.url, report["study"])
    done = exactly_once(study)                                   # nothing RUNNING or WAITING, no configuration twice
    grid = {(float(p["r_inner"]), float(p["beta"])) for p in grid_points([("r_inner", ["1", "2", "4", "8"]),
                                                                           ("beta", ["0", "0.4"])])}
    assert {(float(t.params["r_inner"]), float(t.params["beta"])) for t in done.values()} == grid
    taken = [t for t in study.get_trials() if t.user_attrs.get("fail_kind") == "worker_died"]
    assert taken                                                 # the paused worker's claim, at least
    for t in taken:                                              # and nothing of a late result on any of them
        assert t.state == TrialState.FAIL and t.values is None and not set(MEASURED) & set(t.user_attrs)
    table = (tmp_path / "soak" / "verdict.txt").read_text()
    assert table.count("COMPLETE once") == 8 and "verdict: PASS" in table


def test_the_soak_refuses_a_pause_that_does_not_outlast_the_grace_period(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "recdiff.tools.soak", "--grace-s", "10", "--pause-s", "8",
                           "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "error: --pause-s 8 must exceed the grace period (10 s): a pause must outlast the claim")
