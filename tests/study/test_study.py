"""The Optuna side in-process, with a fake trial runner: recording, search loop, resume, duplicates,
failures and stale heartbeats. (The real runner is exercised by test_cli.py in subprocesses.)"""

from __future__ import annotations

import threading
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

import recdiff.study.storage as study_storage
import recdiff.trial
from recdiff.errors import RecdiffError, SweepStopped
from recdiff.study.connect import open_storage, open_study
from recdiff.study.search import count_trials, make_sampler
from recdiff.study.storage import HeartbeatJournalStorage, fail_stale_trials, record_heartbeat
from recdiff.trial import TrialTimeout
from tests.study.fakes import fake_run_trial, grid_trial, search
from tests.sweep_helpers import compose_plan


def search_plan(tmp_path: Path, *extra: str):
    return compose_plan(["study=search", f"study.storage={tmp_path}/journal.log",
                        f"study.artifact_dir={tmp_path}/artifacts", "study.name=t", "study.heartbeat_interval=1",
                        *extra])


def test_recorded_param_widens_numeric_ranges_and_keeps_choices():
    space = compose_plan().study.space
    v, d = space["r_inner"].recorded("r_inner", 4)
    assert (v, d) == (4, IntDistribution(1, 32, log=True))
    v, d = space["r_inner"].recorded("r_inner", 64)            # outside: the range widens
    assert (v, d.low, d.high) == (64, 1, 64)
    v, d = space["beta"].recorded("beta", 0.2)
    assert isinstance(d, FloatDistribution) and (d.low, d.high) == (0.0, 1.0)
    v, d = space["beta_schedule"].recorded("beta_schedule", "linear")
    assert d == CategoricalDistribution(["constant", "dampened", "linear", "sqrt"])
    with pytest.raises(RecdiffError, match="not among"):
        space["beta_schedule"].recorded("beta_schedule", "cosine")
    with pytest.raises(RecdiffError, match="integer"):
        space["wavefront"].recorded("wavefront", 2.5)


def test_grid_params_names_are_config_keys():
    plan = compose_plan(["sampler.r_inner=8"])
    params = plan.grid_params()
    assert params["r_inner"][0] == 8 and params["sampler"][0] == "diffusion" and params["benchmark"][0] == "compose"
    assert set(params) - {"sampler", "benchmark"} <= {f.name for f in plan.sampler.declared()}
    assert "max_steps" not in params   # unset values are not parameters


def test_grid_trial_recorded_once_with_artifacts_and_duplicate_skipped(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(recdiff.trial, "run_trial", fake_run_trial(calls))
    plan = compose_plan([f"study.storage={tmp_path}/j.log", f"study.artifact_dir={tmp_path}/art", "study.name=g",
                         "sampler.r_inner=2"])
    storage = open_storage(plan.study.storage)
    study = open_study(plan.study, storage)
    assert grid_trial(plan, study, tmp_path / "job0") == (0.2, 50.0)
    assert grid_trial(plan, study, tmp_path / "job1") == (0.2, 50.0)   # identical: skipped
    assert calls == [2]
    (t,) = study.get_trials()
    assert t.state == TrialState.COMPLETE and t.values == [0.2, 50.0] and t.params["r_inner"] == 2
    assert study.metric_names == ["accuracy", "tokens_per_s"]
    assert t.user_attrs["config"]["sampler"]["r_inner"] == 2 and t.user_attrs["output_dir"].endswith("job0")
    arts = optuna.artifacts.get_all_artifact_meta(t, storage=storage)
    assert [a.filename for a in arts] == ["samples.csv"]
    assert (tmp_path / "job1" / "result.json").exists()


@pytest.mark.parametrize("exc, state, reason", [
    (RuntimeError("boom"), TrialState.FAIL, "RuntimeError: boom"),
    (TrialTimeout("timeout: trial ran longer than 1 s"), TrialState.FAIL, "timeout"),
    (__import__("torch").OutOfMemoryError("CUDA out of memory"), TrialState.FAIL, "out of memory"),
    (RecdiffError("headway=4 exceeds wavefront=2"), TrialState.PRUNED, "invalid combination"),
])
def test_failures_are_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch, exc, state, reason):
    calls: list = []
    monkeypatch.setattr(recdiff.trial, "run_trial", fake_run_trial(calls, fail={1: exc}))
    base = [f"study.storage={tmp_path}/j.log", f"study.artifact_dir={tmp_path}/art", "study.name=f"]
    for r in (1, 2):
        plan = compose_plan([*base, f"sampler.r_inner={r}"])
        study = open_study(plan.study, open_storage(plan.study.storage))
        grid_trial(plan, study, tmp_path / f"job{r}")
    first, second = study.get_trials()
    assert first.state == state and reason in (first.user_attrs.get("fail_reason") or first.user_attrs["prune_reason"])
    assert second.state == TrialState.COMPLETE


def test_search_runs_resumes_to_the_total_and_skips_duplicates(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(recdiff.trial, "run_trial", fake_run_trial(calls))
    # r_inner over 3 values only: the sampler must propose duplicates once it has seen them all
    space = ["study.search=[r_inner]", "study.space.r_inner.low=1", "study.space.r_inner.high=3",
             "study.space.r_inner.log=false", "study.algorithm=random", "study.max_duplicates=10"]
    plan = search_plan(tmp_path, "study.n_trials=2", *space)
    study = open_study(plan.study, open_storage(plan.study.storage), make_sampler(plan.study))
    search(plan, study, tmp_path / "job")
    assert count_trials(study) == (2, 0)
    # resume with a larger total: only the missing trial runs; the 3-point space is then exhausted
    plan = search_plan(tmp_path, "study.n_trials=5", *space)
    study = open_study(plan.study, open_storage(plan.study.storage), make_sampler(plan.study, worker=1))
    search(plan, study, tmp_path / "job")
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert sorted(t.params["r_inner"] for t in complete) == [1, 2, 3]
    assert sorted(calls) == [1, 2, 3]                            # no configuration ran twice
    dups = [t for t in study.get_trials() if "duplicate_of" in t.user_attrs]
    assert dups and all(t.state == TrialState.PRUNED for t in dups)
    # resuming a finished study runs nothing
    calls.clear()
    plan = search_plan(tmp_path, "study.n_trials=3", *space)
    search(plan, open_study(plan.study, open_storage(plan.study.storage)), tmp_path / "job")
    assert calls == []
    for t in complete:
        assert (Path(t.user_attrs["output_dir"]) / "result.json").exists()


def test_stale_running_trial_is_failed_and_retried(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(recdiff.trial, "run_trial", fake_run_trial(calls))
    now = [1_000_000.0]
    monkeypatch.setattr(study_storage, "clock", lambda: now[0])   # the heartbeats' clock
    plan = search_plan(tmp_path, "study.n_trials=1", "study.search=[r_inner]")   # grace period: the storage's
    storage = open_storage(plan.study.storage, heartbeat_interval=1, grace_period=1)
    study = open_study(plan.study, storage, make_sampler(plan.study))
    dead = study.ask(plan.search_space())           # a worker that asked, then died without a heartbeat
    dead.set_user_attr("n_samples", 99)             # something the failed attempt had measured
    record_heartbeat(study, dead)
    now[0] += 1.5
    study = open_study(plan.study, open_storage(plan.study.storage, 1, 1), make_sampler(plan.study))
    search(plan, study, tmp_path / "job")
    trials = study.get_trials()
    assert trials[0].state == TrialState.FAIL and trials[0].user_attrs["fail_kind"] == "worker_died"
    assert not study.get_trials(states=(TrialState.RUNNING, TrialState.WAITING))
    (retried,) = study.get_trials(states=(TrialState.COMPLETE,))
    assert retried.params == trials[0].params and retried.system_attrs["failed_trial"] == 0
    # the retry carries nothing of the failed attempt: no stale fail_reason, its own measurements
    assert not {"fail_kind", "fail_reason"} & set(retried.user_attrs) and retried.user_attrs["n_samples"] == 1
    assert count_trials(study) == (1, 0)


def test_a_searched_trial_whose_worker_keeps_dying_is_requeued_at_most_max_retry_times(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(recdiff.trial, "run_trial", fake_run_trial(calls))
    now = [1_000_000.0]
    monkeypatch.setattr(study_storage, "clock", lambda: now[0])   # the heartbeats' clock
    plan = search_plan(tmp_path, "study.n_trials=1", "study.search=[r_inner]", "study.max_retry=2")

    def open_():
        storage = open_storage(plan.study.storage, 1, 5, plan.study.max_retry)
        return open_study(plan.study, storage, make_sampler(plan.study))

    study = open_()
    for attempt in range(3):   # the first run and its two retries each lose their worker
        trial = study.ask(plan.search_space())   # pops the re-queued retry first
        record_heartbeat(study, trial)
        now[0] += 6                              # past the grace period (5 s)
        assert len(fail_stale_trials(open_())) == 1
        study = open_()
        assert len(study.get_trials(states=(TrialState.WAITING,))) == (attempt < 2)
    dead = study.get_trials()
    assert [t.state for t in dead] == [TrialState.FAIL] * 3 and len({str(t.params) for t in dead}) == 1
    assert [t.system_attrs.get("retry_history") for t in dead] == [None, [0], [0, 1]]
    search(plan, study, tmp_path / "job")        # the search goes on with a new proposal; dead attempts do not count
    assert count_trials(study) == (1, 0) and len(calls) == 1


def test_worker_that_asks_for_a_place_another_took_first_steps_back(tmp_path, monkeypatch):
    """Workers count, then ask: with one place left, two may ask. The later-numbered ask is pruned as surplus
    and not counted; the worker waits for the other one's trial instead of running a trial over n_trials."""
    calls: list = []
    monkeypatch.setattr(recdiff.trial, "run_trial", fake_run_trial(calls))
    plan = search_plan(tmp_path, "study.n_trials=1", "study.search=[r_inner]")
    study = open_study(plan.study, open_storage(plan.study.storage, 1, 60), make_sampler(plan.study))
    ask = study.ask

    def ask_after_another_worker(space):
        other = ask(space)                      # the other worker asked between this one's count and its ask
        record_heartbeat(study, other)
        threading.Timer(1.0, lambda: study.tell(other, [0.5, 10.0])).start()
        monkeypatch.setattr(study, "ask", ask)
        return ask(space)

    monkeypatch.setattr(study, "ask", ask_after_another_worker)
    search(plan, study, tmp_path / "job")
    other, mine = study.get_trials()
    assert calls == [] and other.state == TrialState.COMPLETE
    assert mine.state == TrialState.PRUNED and mine.user_attrs["surplus"] is True
    assert count_trials(study) == (1, 0)


def test_storage_urls(tmp_path):
    assert isinstance(open_storage(str(tmp_path / "a" / "j.log")), HeartbeatJournalStorage)
    s = open_storage(f"sqlite:///{tmp_path}/b/s.db")
    assert s.get_heartbeat_interval() == 10
    with pytest.raises(RecdiffError, match="unknown storage"):
        open_storage("redis://localhost/0")
    # nothing answers: an outage, waited for up to the grace period, then one line (exit 1, not bad input)
    with pytest.raises(SweepStopped, match=r"^storage postgresql://nobody@127.0.0.1:1/none unreachable for 1 s \("
                                           r"connection to server .* failed: Connection refused\): the sweep stopped"):
        open_storage("postgresql://nobody@127.0.0.1:1/none", grace_period=1)


def test_existing_study_with_other_directions_is_refused(tmp_path):
    plan = compose_plan([f"study.storage={tmp_path}/j.log", "study.name=d"])
    optuna.create_study(study_name="d", storage=open_storage(plan.study.storage),
                        directions=["minimize", "maximize"])
    with pytest.raises(RecdiffError, match="directions"):
        open_study(plan.study, open_storage(plan.study.storage))
