"""The soak at CI size (issue 52): four workers on a sixteen-configuration grid on PostgreSQL, under kills, a pause
longer than the grace period, a server restart and one interrupt of the whole sweep followed by the same command.
Every configuration ends COMPLETE exactly once, read from the study here (not only from the soak's own table)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from optuna.trial import TrialState

from recdiff.tools.soak.schedule import KINDS, make_schedule
from recdiff.tools.soak.verdict import MEASURED, grid_points

from .conftest import REPO, load
from .test_scale import exactly_once

pytestmark = pytest.mark.slow

BUDGET_S = 180   # the CI machine: 2 cores


@pytest.mark.slow
def test_a_soak_of_four_workers_ends_with_every_configuration_complete_exactly_once(tmp_path, postgres):
    restart = f"{postgres.stop_cmd} && sleep 1 && {postgres.start_cmd}"
    began = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "recdiff.tools.soak", "--workers", "4", "--storage", postgres.url, "--restart-cmd",
         restart, "--restarts", "1", "--kills", "2", "--pauses", "1", "--seed", "45", "--window", "20",
         "--grace-s", "10", "--heartbeat-s", "1", "--out", str(tmp_path / "soak")],
        cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=2 * BUDGET_S)
    took = time.monotonic() - began
    report = json.loads((tmp_path / "soak" / "soak.json").read_text())
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert took < BUDGET_S, f"the soak took {took:.0f} s"
    landed = {kind: sum(f["landed"] for f in report["faults"] if f["kind"] == kind) for kind in KINDS}
    assert all(n >= 1 for n in landed.values()), landed
    assert report["runs"] == 2                                   # interrupted once, then the same command again
    assert [f["held"] != [] for f in report["faults"] if f["kind"] == "pause"] == [True]   # it stopped a claim

    study = load(postgres.url, report["study"])
    done = exactly_once(study)                                   # nothing RUNNING or WAITING, no configuration twice
    grid = {(float(p["r_inner"]), float(p["beta"])) for p in grid_points([("r_inner", ["1", "2", "4", "8"]),
                                                                           ("beta", ["0", "0.2", "0.4", "0.6"])])}
    assert {(float(t.params["r_inner"]), float(t.params["beta"])) for t in done.values()} == grid
    taken = [t for t in study.get_trials() if t.user_attrs.get("fail_kind") == "worker_died"]
    assert taken                                                 # the paused worker's claim, at least
    for t in taken:                                              # and nothing of a late result on any of them
        assert t.state == TrialState.FAIL and t.values is None and not set(MEASURED) & set(t.user_attrs)
    table = (tmp_path / "soak" / "verdict.txt").read_text()
    assert table.count("COMPLETE once") == 16 and "verdict: PASS" in table


def test_a_schedule_is_the_seeds_and_stays_in_its_window():
    one, again = (make_schedule(7, 120, kills=5, pauses=3, restarts=2, interrupt=True, pause_s=14, down_s=1)
                  for _ in range(2))
    assert one == again and one != make_schedule(8, 120, 5, 3, 2, True, 14, 1)
    assert [one.count(k) for k in KINDS] == [5, 3, 2, 1]
    timed = [f.at for f in one.faults if f.kind != "interrupt"]
    assert all(0 <= t < 120 for t in timed) and timed == sorted(timed)
    (interrupt,) = [f for f in one.faults if f.kind == "interrupt"]
    assert 1 / 3 <= interrupt.at <= 2 / 3             # a share of the grid COMPLETE: a run before it and one after
    assert {f.length for f in one.faults if f.kind == "pause"} == {14}


def test_the_soak_refuses_a_pause_that_does_not_outlast_the_grace_period(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "recdiff.tools.soak", "--grace-s", "10", "--pause-s", "8",
                           "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "error: --pause-s 8 must exceed the grace period (10 s): a pause must outlast the claim")


def _trial(number, state, r_inner, beta, *, pid=1, values=None, **attrs):
    from optuna.distributions import FloatDistribution, IntDistribution
    from optuna.trial import create_trial

    from recdiff.study.storage import CLAIMANT_ATTR

    t = create_trial(state=state, values=values if state == TrialState.COMPLETE else None,
                     params={"r_inner": r_inner, "beta": beta},
                     distributions={"r_inner": IntDistribution(1, 32), "beta": FloatDistribution(0, 1)},
                     user_attrs={"config_hash": f"{r_inner}-{beta}", **attrs},
                     system_attrs={CLAIMANT_ATTR: {"pid": pid}})
    t.number = number
    return t


def test_the_verdict_names_what_is_doubled_missing_or_tainted(tmp_path):
    from recdiff.tools.soak.verdict import judge

    axes = [("sampler.r_inner", ["1", "2"]), ("sampler.beta", ["0", "0.5"])]
    trials = [
        _trial(0, TrialState.FAIL, 1, 0.0, fail_kind="worker_died", fail_reason="worker died (no heartbeat ...)"),
        _trial(1, TrialState.COMPLETE, 1, 0.0, values=[0.5, 5.0]),                           # retried, then once
        _trial(2, TrialState.COMPLETE, 1, 0.5, values=[0.5, 5.0]),
        _trial(3, TrialState.COMPLETE, 1, 0.5, values=[0.4, 4.0]),                           # doubled
        _trial(4, TrialState.RUNNING, 2, 0.0, pid=77),                                         # left RUNNING
        _trial(5, TrialState.FAIL, 2, 0.5, fail_kind="worker_died", n_samples=4),             # a late result on it
    ]
    v = judge(trials, axes, [], [], max_retry=2)
    assert [r.verdict for r in v.rows] == [
        "COMPLETE once, retried after worker_died ×1", "DOUBLED: COMPLETE ×2 (trials [2, 3])",
        "missing: RUNNING (trial 4, process 77)", "missing: FAIL (no reason)"]
    assert [r.config for r in v.rows] == ["r_inner=1 beta=0", "r_inner=1 beta=0.5", "r_inner=2 beta=0",
                                          "r_inner=2 beta=0.5"]
    assert not v.passed
    assert {name: ok for name, (ok, _) in v.checks.items()} == {
        "every configuration COMPLETE exactly once": False, "no trial left RUNNING or WAITING": False,
        "no result from a worker whose claim was taken over": False, "no traceback; every error one line": True}
    clean = judge(trials[:2], axes[:1] + [("sampler.beta", ["0"])], [], [], max_retry=2)
    assert [r.verdict for r in clean.rows] == ["COMPLETE once, retried after worker_died ×1", "missing: never claimed"]
