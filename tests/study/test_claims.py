"""Claims in-process, on a fake clock (no test here waits for real time to pass): a grid configuration is claimed
before it is evaluated; a second sweep on the study waits for a live claim instead of running the configuration too;
a claim whose process has ended on this machine is taken over at once, one elsewhere once its heartbeat is older than
the grace period, without the failed attempt's attributes; study.max_retry bounds how often; a trial whose artifacts
cannot be stored is not COMPLETE. (Search-mode retries: test_study.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import optuna
import pytest
from optuna.trial import TrialState

import recdiff.study.record as study_record
import recdiff.study.results as study_results
import recdiff.trial
from recdiff.study import claimant
from recdiff.study.identity import config_hash
from recdiff.study.record import claim_trial, tell
from recdiff.study.storage import CLAIMANT_ATTR, fail_stale_trials, storage_of
from tests.study.fakes import FakeClock, fake_run_trial, grid_plan, grid_trial, open_


def claimed_elsewhere(study, plan):
    """A claim by a process on another machine (its liveness cannot be looked at: only its heartbeat tells)."""
    trial = claim_trial(study, plan.grid_params(), {"config_hash": config_hash(plan)})
    storage_of(study).set_trial_system_attr(trial._trial_id, CLAIMANT_ATTR,
                                               {"host": "node-b", "machine": "elsewhere", "pid": 1, "started": 1})
    return trial


def ended_process() -> dict:
    """The claimant record of a process that ran on this machine and has ended."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        started = claimant.started(child.pid)
        assert started is not None
    finally:
        child.kill()
        child.wait()
    return {"host": "this host", "machine": claimant.machine(), "pid": child.pid, "started": started}


def test_a_configuration_claimed_by_a_live_process_is_waited_for_and_run_once(tmp_path, monkeypatch):
    calls: list = []
    started, release = threading.Event(), threading.Event()
    run = fake_run_trial(calls)

    def slow(work, trial, out):
        started.set()
        assert release.wait(60)
        return run(work, trial, out)

    monkeypatch.setattr(recdiff.trial, "run_trial", slow)
    plan = grid_plan(tmp_path)
    first = threading.Thread(target=grid_trial, args=(plan, open_(plan), tmp_path / "a"))
    first.start()
    assert started.wait(60)

    def finish_first():   # the second sweep has looked and waits: now the first one completes
        release.set()
        first.join(60)

    clock = FakeClock(monkeypatch, then=finish_first)
    try:
        # the second sweep (its own storage object, as another process has) waits for the claim instead of running
        assert grid_trial(plan, open_(plan), tmp_path / "b") == (0.2, 50.0)
    finally:
        release.set()
        first.join(60)
    assert calls == [2] and clock.waits == [1]
    (t,) = open_(plan).get_trials()
    assert t.state == TrialState.COMPLETE and t.values == [0.2, 50.0]
    assert t.system_attrs[CLAIMANT_ATTR]["pid"] == claimant.this_process()["pid"]
    waited = json.loads((tmp_path / "b" / "result.json").read_text())
    assert waited["state"] == "COMPLETE" and waited["skipped_duplicate"] and waited["trial_number"] == t.number


def test_claims_made_at_the_same_moment_are_settled_by_trial_number(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(recdiff.trial, "run_trial", fake_run_trial(calls))
    plan = grid_plan(tmp_path)
    study = open_(plan)
    digest = config_hash(plan)
    other = claim_trial(study, plan.grid_params(), {"config_hash": digest})   # another process, a moment earlier
    looks, real = [], study_record.holder

    def holder(s, d):   # our first look came before the other claim was visible
        looks.append(d)
        return None if len(looks) == 1 else real(s, d)

    monkeypatch.setattr(study_record, "holder", holder)
    # the other process completes its trial while this one waits
    FakeClock(monkeypatch, then=lambda: storage_of(study).set_trial_state_values(
        other._trial_id, TrialState.COMPLETE, values=[0.5, 5.0]))
    assert grid_trial(plan, study, tmp_path / "late") == (0.5, 5.0)
    assert calls == []
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.PRUNED]
    assert trials[1].user_attrs["duplicate_of"] == other.number


def test_a_claim_elsewhere_is_taken_over_once_its_heartbeat_is_older_than_the_grace_period(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(recdiff.trial, "run_trial", fake_run_trial(calls))
    clock = FakeClock(monkeypatch)
    plan = grid_plan(tmp_path)
    dead = claimed_elsewhere(open_(plan), plan)   # then its node is lost
    assert grid_trial(plan, open_(plan), tmp_path / "late") == (0.2, 50.0)
    assert calls == [2]
    assert 2 < sum(clock.waits) <= 3              # it waited for the grace period (2 s), polling each second
    trials = open_(plan).get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]   # no WAITING retry left behind
    assert trials[0].number == dead.number and trials[0].user_attrs["fail_kind"] == "worker_died"
    assert trials[0].user_attrs["fail_reason"] == "worker died (no heartbeat within the grace period)"
    assert trials[1].system_attrs["failed_trial"] == dead.number
    assert not {"fail_kind", "fail_reason"} & set(trials[1].user_attrs)


def test_a_claim_whose_process_ended_on_this_machine_is_taken_over_at_once(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(recdiff.trial, "run_trial", fake_run_trial(calls))
    clock = FakeClock(monkeypatch)
    plan = grid_plan(tmp_path, "study.grace_period=3600")   # the heartbeat would keep it for an hour
    study = open_(plan)
    dead = claim_trial(study, plan.grid_params(), {"config_hash": config_hash(plan)})
    gone = ended_process()
    storage_of(study).set_trial_system_attr(dead._trial_id, CLAIMANT_ATTR, gone)
    assert grid_trial(plan, open_(plan), tmp_path / "again") == (0.2, 50.0)
    assert calls == [2] and clock.waits == []     # no waiting at all
    failed, retry = open_(plan).get_trials()
    assert failed.state == TrialState.FAIL and failed.user_attrs["fail_kind"] == "worker_died"
    assert failed.user_attrs["fail_reason"] == f"worker died (process {gone['pid']} on this host is gone)"
    assert retry.state == TrialState.COMPLETE and retry.system_attrs["failed_trial"] == failed.number


@pytest.mark.slow
def test_a_claimant_is_gone_when_its_process_ended_or_its_id_was_reused():
    me = claimant.this_process()
    assert claimant.machine() is not None and me["started"] is not None
    assert not claimant.is_gone(me)
    assert claimant.is_gone({**me, "started": me["started"] - 1})            # the id now names another process
    assert not claimant.is_gone({**me, "machine": "another machine"})       # elsewhere: not ours to judge
    assert not claimant.is_gone(None) and not claimant.is_gone({"pid": me["pid"]})
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    who = {**me, "pid": child.pid, "started": claimant.started(child.pid)}
    child.wait()
    assert claimant.is_gone(who)
    zombie = subprocess.Popen(["sleep", "600"])
    who = {**me, "pid": zombie.pid, "started": claimant.started(zombie.pid)}
    zombie.kill()
    try:   # killed, its exit not yet read: a zombie is gone too
        for _ in range(1000):
            if claimant.is_gone(who):
                break
            threading.Event().wait(0.01)
        assert claimant.is_gone(who)
    finally:
        zombie.wait()


def test_a_configuration_whose_worker_died_more_than_max_retry_times_is_not_run_again(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(recdiff.trial, "run_trial", fake_run_trial(calls))
    FakeClock(monkeypatch)
    monkeypatch.setenv(study_results.SWEEP_TOKEN_ENV, "sweep-1")
    plan = grid_plan(tmp_path, "study.max_retry=1", "study.grace_period=3600")
    study = open_(plan)
    for attempt in range(2):                       # the first run and its one retry: each kills its worker
        trial = claim_trial(study, plan.grid_params(), {"config_hash": config_hash(plan)})
        storage_of(study).set_trial_system_attr(trial._trial_id, CLAIMANT_ATTR, ended_process())
        assert fail_stale_trials(open_(plan)) == [trial._trial_id]
    study = open_(plan)
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert waiting == []                           # Optuna's retry callback re-queued it once (max_retry=1)
    assert grid_trial(plan, study, tmp_path / "job") is None
    assert calls == []
    result = json.loads((tmp_path / "job" / "result.json").read_text())
    assert result["state"] == "SKIPPED" and result["retries_exhausted"] == 2
    from recdiff.study.sweep_status import kind, summarize

    assert kind(result) == "retries_exhausted"
    summary = summarize(tmp_path, "sweep-1")   # the sweep exits 1 with this line, and prints no table
    assert summary.missing == 1 and str(summary) == (
        f"1 configuration of this sweep not recorded (1 retries exhausted; study.max_retry limits how often a "
        f"configuration whose worker died runs again); see {tmp_path}")
    assert [t.state for t in study.get_trials()] == [TrialState.FAIL, TrialState.FAIL]
    assert study.get_trials()[1].system_attrs["failed_trial"] == 0
    # raising the limit runs it again
    plan = grid_plan(tmp_path, "study.max_retry=2", "study.grace_period=3600")
    assert grid_trial(plan, open_(plan), tmp_path / "job2") == (0.2, 50.0)


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
    assert not optuna.artifacts.get_all_artifact_meta(t, storage=storage_of(study))


@pytest.mark.parametrize("kind", ["error", "oom"])
def test_a_trial_that_raises_or_runs_out_of_memory_is_fail_with_its_kind(tmp_path, monkeypatch, kind):
    import torch

    exc = RuntimeError("boom") if kind == "error" else torch.OutOfMemoryError("CUDA out of memory. Tried 2 GiB")
    monkeypatch.setattr(recdiff.trial, "run_trial", fake_run_trial([], fail={2: exc}))
    plan = grid_plan(tmp_path)
    study = open_(plan)
    assert grid_trial(plan, study, tmp_path / "job") is None
    (t,) = study.get_trials()
    assert t.state == TrialState.FAIL and t.user_attrs["fail_kind"] == kind
    assert t.user_attrs["fail_reason"] == {"error": "RuntimeError: boom",
                                           "oom": "out of memory: CUDA out of memory. Tried 2 GiB"}[kind]


def test_an_outcome_told_after_another_worker_failed_the_trial_leaves_what_that_worker_recorded(tmp_path, caplog):
    from recdiff.trial import Outcome, State

    plan = grid_plan(tmp_path)
    study = open_(plan)
    trial = claim_trial(study, plan.grid_params(), {"config_hash": config_hash(plan)})
    storage_of(study).set_trial_state_values(trial._trial_id, TrialState.FAIL)   # found stale by another worker
    assert tell(open_(plan), trial, Outcome(State.COMPLETE, [0.5, 5.0], {"n_samples": 1}, []), "") is None
    done = open_(plan).get_trials()[0]
    assert done.state == TrialState.FAIL and done.values is None and "n_samples" not in done.user_attrs
    assert (f"trial {trial.number}: this worker's claim was taken over while it was away (stopped, or cut off from the "
            "storage, for longer than study.grace_period): the trial is FAIL; this worker's COMPLETE result is "
            "dropped") in caplog.text
