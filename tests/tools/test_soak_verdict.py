"""The soak's schedule and verdict as plain functions (no processes, no servers): the verdict fails on a configuration
doubled (also under another config_hash), missing, outside the grid or tainted, and on a scheduled fault that did not
land. The soak itself, at CI size, runs in test_soak.py (slow)."""

from __future__ import annotations

from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from recdiff.study.storage import CLAIMANT_ATTR
from recdiff.tools.soak.chaos import Landed
from recdiff.tools.soak.schedule import KINDS, make_schedule
from recdiff.tools.soak.verdict import judge, table

AXES = [("sampler.r_inner", ["1", "2"]), ("sampler.beta", ["0", "0.5"])]


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


def _trial(number, state, r_inner, beta, *, pid=1, values=None, config_hash=None, eta=0.1, **attrs):
    """A trial as a soak's worker records it (its claimant's pid among the system attributes)."""
    t = create_trial(state=state, values=values if state == TrialState.COMPLETE else None,
                     params={"r_inner": r_inner, "beta": beta, "eta": eta},
                     distributions={"r_inner": IntDistribution(1, 32), "beta": FloatDistribution(0, 1),
                                    "eta": FloatDistribution(0, 1)},
                     user_attrs={"config_hash": config_hash or f"{r_inner}-{beta}-{eta}", **attrs},
                     system_attrs={CLAIMANT_ATTR: {"pid": pid}})
    t.number = number
    return t


def test_the_verdict_names_what_is_doubled_missing_or_tainted():
    trials = [
        _trial(0, TrialState.FAIL, 1, 0.0, fail_kind="worker_died", fail_reason="worker died (no heartbeat ...)"),
        _trial(1, TrialState.COMPLETE, 1, 0.0, values=[0.5, 5.0]),                           # retried, then once
        _trial(2, TrialState.COMPLETE, 1, 0.5, values=[0.5, 5.0]),
        _trial(3, TrialState.COMPLETE, 1, 0.5, values=[0.4, 4.0]),                           # doubled
        _trial(4, TrialState.RUNNING, 2, 0.0, pid=77),                                         # left RUNNING
        _trial(5, TrialState.FAIL, 2, 0.5, fail_kind="worker_died", n_samples=4),             # a late result on it
    ]
    v = judge(trials, AXES, [], [], max_retry=2)
    assert [r.verdict for r in v.rows] == [
        "COMPLETE once, retried after worker_died ×1", "DOUBLED: COMPLETE ×2 (trials [2, 3])",
        "missing: RUNNING (trial 4, process 77)", "missing: FAIL (no reason)"]
    assert [r.config for r in v.rows] == ["r_inner=1 beta=0", "r_inner=1 beta=0.5", "r_inner=2 beta=0",
                                          "r_inner=2 beta=0.5"]
    assert not v.passed
    assert {name: ok for name, (ok, _) in v.checks.items()} == {
        "every configuration COMPLETE exactly once": False, "no trial outside the grid": True,
        "no trial left RUNNING or WAITING": False, "no result from a worker whose claim was taken over": False,
        "no traceback; every error one line": True, "every scheduled fault landed": True}
    clean = judge(trials[:2], AXES[:1] + [("sampler.beta", ["0"])], [], [], max_retry=2)
    assert [r.verdict for r in clean.rows] == ["COMPLETE once, retried after worker_died ×1", "missing: never claimed"]


def whole_grid(start: int = 0) -> list:
    """Every configuration of AXES COMPLETE once."""
    points = [(1, 0.0), (1, 0.5), (2, 0.0), (2, 0.5)]
    return [_trial(start + i, TrialState.COMPLETE, r, b, values=[1.0, 5.0]) for i, (r, b) in enumerate(points)]


def test_a_clean_study_passes():
    v = judge(whole_grid(), AXES, [], [Landed("kill", 3.0, True, "w1", 11, [2])], max_retry=2)
    assert v.passed and [r.verdict for r in v.rows] == ["COMPLETE once"] * 4


def test_a_configuration_recorded_again_under_another_hash_fails():
    """The same parameters COMPLETE twice, the second under another config_hash (a worker that hashed its
    configuration otherwise): one configuration, doubled; grouping by hash alone would have called it fine."""
    trials = [*whole_grid(), _trial(4, TrialState.COMPLETE, 2, 0.5, values=[1.0, 5.0], config_hash="other")]
    v = judge(trials, AXES, [], [], max_retry=2)
    assert not v.passed
    assert v.rows[3].config == "r_inner=2 beta=0.5" and v.rows[3].trials == [3, 4]
    assert v.rows[3].verdict == "DOUBLED: recorded under 2 config hashes (2-0.5-0.1, other; COMPLETE ×2)"
    assert v.checks["every configuration COMPLETE exactly once"] == (False, "3 of 4; not: ['r_inner=2 beta=0.5']")
    assert len(v.rows) == 4                     # not a row outside the grid: the same configuration


def test_a_trial_outside_the_grid_fails():
    trials = [*whole_grid(), _trial(4, TrialState.COMPLETE, 2, 0.5, values=[1.0, 5.0], eta=0.3)]   # another eta
    v = judge(trials, AXES, [], [], max_retry=2)
    assert not v.passed and v.checks["every configuration COMPLETE exactly once"][0]
    (extra,) = [r for r in v.rows if not r.in_grid]
    assert extra.config == "r_inner=2 beta=0.5 eta=0.3 [not in the grid]" and not extra.ok
    assert v.checks["no trial outside the grid"] == (False, "r_inner=2 beta=0.5 eta=0.3 [not in the grid] (trials [4])")
    # a baseline the sweep recorded is fine
    baseline = _trial(4, TrialState.COMPLETE, 32, 0.0, values=[1.0, 1.0], baseline=True)
    assert judge([*whole_grid(), baseline], AXES, [], [], max_retry=2).passed


def test_a_scheduled_fault_that_did_not_land_fails_and_is_named():
    faults = [Landed("kill", 4.2, True, "w0", 10, [1]),
              Landed("pause", 61.0, False, note="nothing to land on before the window ended"),
              Landed("interrupt", 80.0, False, note="the sweep ended first")]
    v = judge(whole_grid(), AXES, [], faults, max_retry=2)
    assert not v.passed and all(r.ok for r in v.rows)
    assert v.checks["every scheduled fault landed"] == (
        False, "pause: nothing to land on before the window ended; interrupt: the sweep ended first")
    text = table(v, {"kill": 1, "pause": 1, "restart": 0, "interrupt": 1})
    assert "pause              1       0" in text and "(not landed: nothing to land on before the window ended)" in text
    assert "  FAIL  every scheduled fault landed: pause: nothing to land on" in text
    assert text.endswith("verdict: FAIL")
