"""Concurrency in-process: a grid configuration is claimed before it is evaluated, so a second sweep on the study
skips it; a crashed claimant's configuration runs again after the grace period, without the failed attempt's
attributes; a trial whose artifacts cannot be stored is not COMPLETE. (Search-mode retries: test_study.py.)"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

import recdiff.trial
from recdiff import study as rs

from .conftest import compose_plan
from .test_study import fake_run_trial, grid_trial


def grid_plan(tmp_path: Path, *extra: str):
    return compose_plan([f"study.storage={tmp_path}/j.log", f"study.artifact_dir={tmp_path}/art", "study.name=c",
                         "sampler.r_inner=2", "study.heartbeat_interval=1", "study.grace_period=2", *extra])


def open_(plan):
    s = plan.study
    return rs.open_study(s, rs.open_storage(s.storage, s.heartbeat_interval, s.grace_period, s.max_retry))


def test_a_running_configuration_is_skipped_by_a_second_sweep(tmp_path, monkeypatch):
    calls: list = []
    started, release = threading.Event(), threading.Event()
    run = fake_run_trial(calls)

    def slow(work, trial, out):
        started.set()
        assert release.wait(30)
        return run(work, trial, out)

    monkeypatch.setattr(recdiff.trial, "run_trial", slow)
    plan = grid_plan(tmp_path)
    first = threading.Thread(target=grid_trial, args=(plan, open_(plan), tmp_path / "a"))
    first.start()
    try:
        assert started.wait(30)
        # the second sweep (its own storage object, as another process has) sees the claim and does not evaluate
        assert grid_trial(plan, open_(plan), tmp_path / "b") is None
    finally:
        release.set()
        first.join(30)
    assert calls == [2]
    (t,) = open_(plan).get_trials()
    assert t.state == TrialState.COMPLETE and t.values == [0.2, 50.0]
    import json

    skipped = json.loads((tmp_path / "b" / "result.json").read_text())
    assert skipped["state"] == "SKIPPED" and skipped["trial_number"] == t.number


def test_claims_made_at_the_same_moment_are_settled_by_trial_number(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(recdiff.trial, "run_trial", fake_run_trial(calls))
    plan = grid_plan(tmp_path)
    study = open_(plan)
    digest = rs.config_hash(plan)
    other = rs.claim_trial(study, plan.grid_params(), {"config_hash": digest})   # another process, a moment earlier
    looks = []

    def holder(s, d):   # our first look came before the other claim was visible
        looks.append(d)
        return None if len(looks) == 1 else rs.record.holder(s, d)

    monkeypatch.setattr(rs.grid, "holder", holder)
    assert grid_trial(plan, study, tmp_path / "late") is None
    assert calls == []
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.RUNNING, TrialState.PRUNED]
    assert trials[1].user_attrs["duplicate_of"] == other.number


def test_a_crashed_claimants_configuration_runs_again_after_the_grace_period(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(recdiff.trial, "run_trial", fake_run_trial(calls))
    plan = grid_plan(tmp_path)
    study = open_(plan)
    dead = rs.claim_trial(study, plan.grid_params(), {"config_hash": rs.config_hash(plan)})   # then SIGKILL
    assert grid_trial(plan, open_(plan), tmp_path / "early") is None         # still alive: skipped
    assert calls == []
    time.sleep(2.5)
    assert grid_trial(plan, open_(plan), tmp_path / "late") == (0.2, 50.0)
    assert calls == [2]
    trials = open_(plan).get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]   # no WAITING retry left behind
    assert trials[0].number == dead.number and trials[0].user_attrs["fail_kind"] == "worker_died"
    assert trials[1].system_attrs["failed_trial"] == dead.number
    assert not {"fail_kind", "fail_reason"} & set(trials[1].user_attrs)


def test_a_trial_whose_artifacts_cannot_be_stored_is_not_complete(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(recdiff.trial, "run_trial", fake_run_trial(calls))
    (tmp_path / "blocker").write_text("a file where the artifact directory should be")
    plan = grid_plan(tmp_path, f"study.artifact_dir={tmp_path}/blocker/art")
    study = open_(plan)
    assert grid_trial(plan, study, tmp_path / "job") is None
    (t,) = study.get_trials()
    assert t.state == TrialState.FAIL and t.values is None
    assert t.user_attrs["fail_kind"] == "artifacts" and "cannot store artifacts" in t.user_attrs["fail_reason"]
    assert not optuna.artifacts.get_all_artifact_meta(t, storage=rs.storage_of(study))
