"""Fencing (issue 52): a worker that wakes after its claim was taken over records nothing over the new holder's
result; it drops its own with one log line and its job goes on. The end of a claimed trial is one atomic step, fenced
by the claim's token, in a journal and in a database. In-process, on a fake clock."""

from __future__ import annotations

import json
import threading

import pytest
from optuna.trial import TrialState

import recdiff.study.storage as study_storage
import recdiff.trial
from recdiff.study.identity import config_hash
from recdiff.study.reconnect import ENDED_ATTR
from recdiff.study.record import claim_asked, claim_trial, tell
from recdiff.study.storage import CLAIM_ATTR, fail_stale_trials, finish_claim, holding, storage_of
from recdiff.trial import Outcome, State
from recdiff.trial.measure import TrialResult
from tests.study.fakes import FakeClock, fake_run_trial, grid_plan, grid_trial, open_

DROPPED = ("trial 0: this worker's claim was taken over while it was away (stopped, or cut off from the storage, for "
           "longer than study.grace_period): the trial is FAIL (worker died (no heartbeat within the grace period)); "
           "this worker's COMPLETE result is dropped")


def test_a_paused_workers_late_result_is_dropped_and_logged_and_the_new_holders_result_stands(tmp_path, monkeypatch,
                                                                                               caplog):
    """Worker A claims the configuration and stops (no heartbeats) in mid-trial; worker B finds the claim stale after
    the grace period, fails it, runs the retry and records it. Then A wakes with its own measurement: it is dropped
    (one log line), and A's job waits for the configuration as any job does and ends with B's trial."""
    calls: list = []
    fake = fake_run_trial(calls)
    a_measuring, b_recorded = threading.Event(), threading.Event()

    def run_trial(work, trial, out):
        if threading.current_thread().name == "worker-a":   # A's measurement differs from B's: 0.9, 9 tokens/s
            a_measuring.set()
            assert b_recorded.wait(60)
            return TrialResult(accuracy=0.9, tokens_per_s=9.0, attrs=fake(work, trial, out).attrs)
        return fake(work, trial, out)

    monkeypatch.setattr(recdiff.trial, "run_trial", run_trial)
    beating = study_storage.Heartbeat._run
    # A (trial 0) is stopped: its heartbeats stop with it; B's go on
    monkeypatch.setattr(study_storage.Heartbeat, "_run", lambda self: None if self.trial.number == 0 else beating(self))
    plan = grid_plan(tmp_path)                     # heartbeat 1 s, grace period 2 s
    clock = FakeClock(monkeypatch)                 # A claims at its time: its only heartbeat
    got: list = []
    a = threading.Thread(target=lambda: got.append(grid_trial(plan, open_(plan), tmp_path / "a")), name="worker-a")
    a.start()
    try:
        assert a_measuring.wait(60)
        assert grid_trial(plan, open_(plan), tmp_path / "b") == (0.2, 50.0)   # B: waits, takes over, records
        assert 2 < sum(clock.waits) <= 3
    finally:
        b_recorded.set()
        a.join(60)
    assert got == [(0.2, 50.0)]                    # A's job ends with the configuration COMPLETE: B's trial
    assert DROPPED in caplog.text and caplog.text.count("result is dropped") == 1
    stale, retry = open_(plan).get_trials()
    assert stale.state == TrialState.FAIL and stale.values is None and stale.user_attrs["fail_kind"] == "worker_died"
    assert not {"accuracy_lo", "n_samples", "config"} & set(stale.user_attrs)   # nothing of A's measurement on it
    assert retry.state == TrialState.COMPLETE and retry.values == [0.2, 50.0]
    assert retry.system_attrs["failed_trial"] == stale.number
    assert retry.system_attrs[CLAIM_ATTR] != stale.system_attrs[CLAIM_ATTR]
    a_result = json.loads((tmp_path / "a" / "result.json").read_text())
    assert a_result["skipped_duplicate"] and a_result["trial_number"] == retry.number
    assert a_result["values"] == {"accuracy": 0.2, "tokens_per_s": 50.0}


@pytest.fixture(params=["journal", "sqlite"])
def claimed(request, tmp_path):
    """(study, claimed trial) on a journal or a database storage."""
    url = f"{tmp_path}/j.log" if request.param == "journal" else f"sqlite:///{tmp_path}/s.db"
    plan = grid_plan(tmp_path, f"study.storage={url}")
    study = open_(plan)
    return study, claim_trial(study, plan.grid_params(), {"config_hash": config_hash(plan)})


def test_of_a_holder_and_a_worker_failing_its_stale_claim_exactly_one_ends_the_trial(claimed):
    study, trial = claimed
    storage, tid, token = storage_of(study), trial._trial_id, trial.system_attrs[CLAIM_ATTR]
    failed = {"fail_kind": "worker_died", "fail_reason": "worker died (no heartbeat within the grace period)"}
    assert not finish_claim(storage, tid, "another claim's token", TrialState.FAIL, None, failed)
    assert storage.get_trial(tid).state == TrialState.RUNNING and "fail_kind" not in storage.get_trial(tid).user_attrs
    assert finish_claim(storage, tid, token, TrialState.COMPLETE, [0.5, 5.0], {"n_samples": 7})   # the holder
    assert not finish_claim(storage, tid, token, TrialState.FAIL, None, failed)                 # then the other
    done = storage.get_trial(tid)
    assert done.state == TrialState.COMPLETE and done.values == [0.5, 5.0]
    assert done.user_attrs["n_samples"] == 7 and "fail_kind" not in done.user_attrs


def test_a_stale_claim_failed_first_takes_nothing_from_its_late_holder(claimed):
    study, trial = claimed
    assert fail_stale_trials(study) == []          # fresh: not stale
    storage, tid = storage_of(study), trial._trial_id
    assert finish_claim(storage, tid, trial.system_attrs[CLAIM_ATTR], TrialState.FAIL, None,
                           {"fail_kind": "worker_died", "fail_reason": "taken over"})
    assert not finish_claim(storage, tid, trial.system_attrs[CLAIM_ATTR], TrialState.COMPLETE, [0.5, 5.0],
                               {"n_samples": 7})
    done = storage.get_trial(tid)
    assert done.state == TrialState.FAIL and done.values is None and "n_samples" not in done.user_attrs


def test_an_interrupted_worker_whose_claim_was_taken_over_re_queues_nothing(tmp_path, monkeypatch):
    clock = FakeClock(monkeypatch)
    plan = grid_plan(tmp_path)
    study = open_(plan)
    trial = claim_trial(study, plan.grid_params(), {"config_hash": config_hash(plan)})
    clock.now += 10                                   # its heartbeat is older than the grace period
    assert fail_stale_trials(open_(plan)) == [trial._trial_id]   # failed and re-queued once, by another worker
    with pytest.raises(KeyboardInterrupt):            # then the stopped worker wakes, and is interrupted
        with holding(study, trial, 3600):
            raise KeyboardInterrupt
    states = [t.state for t in open_(plan).get_trials()]
    assert states == [TrialState.FAIL, TrialState.WAITING]
    assert open_(plan).get_trials()[0].user_attrs["fail_kind"] == "worker_died"


def test_a_journal_writes_the_end_of_a_claim_in_one_append(tmp_path):
    plan = grid_plan(tmp_path)
    study = open_(plan)
    trial = claim_trial(study, plan.grid_params(), {"config_hash": config_hash(plan)})
    journal = tmp_path / "j.log"
    before = journal.read_bytes().count(b"\n")
    appends: list = []
    backend = storage_of(study)._backend
    real = backend.append_logs
    backend.append_logs = lambda logs: (appends.append(len(logs)), real(logs))
    assert finish_claim(storage_of(study), trial._trial_id, trial.system_attrs[CLAIM_ATTR],
                           TrialState.COMPLETE, [0.5, 5.0], {"a": 1, "b": 2})
    assert appends == [3] and journal.read_bytes().count(b"\n") == before + 3   # two attributes and the state


def test_a_database_retry_of_the_end_of_a_claim_knows_its_own_committed_write(tmp_path):
    """The connection is lost after the commit, before its reply: the retry finds the trial ended by this very call
    (not by another worker) and reports it recorded."""
    plan = grid_plan(tmp_path, f"study.storage=sqlite:///{tmp_path}/s.db")
    study = open_(plan)
    trial = claim_trial(study, plan.grid_params(), {"config_hash": config_hash(plan)})
    inner = storage_of(study)._backend
    token = trial.system_attrs[CLAIM_ATTR]
    assert inner._finish_once(trial._trial_id, token, TrialState.COMPLETE, [0.5, 5.0], {}, "call-1")
    assert inner._finish_once(trial._trial_id, token, TrialState.COMPLETE, [0.5, 5.0], {}, "call-1")   # the retry
    assert not inner._finish_once(trial._trial_id, token, TrialState.COMPLETE, [0.5, 5.0], {}, "call-2")
    assert inner.get_trial(trial._trial_id).system_attrs[ENDED_ATTR] == "call-1"


def test_a_search_trial_failed_as_stale_before_its_worker_claimed_it_is_left_to_the_retry(tmp_path):
    plan = grid_plan(tmp_path)
    study = open_(plan)
    asked = study.ask()
    storage_of(study).set_trial_state_values(asked._trial_id, TrialState.FAIL)   # found stale meanwhile
    assert claim_asked(study, asked) is None      # no error: the search loop asks again


def test_an_outcome_is_recorded_whole_under_the_claim(claimed, tmp_path):
    study, trial = claimed
    done = tell(study, trial, Outcome(State.COMPLETE, [0.5, 5.0], {"n_samples": 3}, []), str(tmp_path / "art"))
    assert done is not None and done.state == TrialState.COMPLETE and done.values == [0.5, 5.0]
    assert done.user_attrs["n_samples"] == 3
