"""The tune's search in-process, with a fake trial runner (no model): the paper's defaults first, then LoopSpec's,
Optuna's own constraint on every measured trial, the budgets (trials, time, patience), a resumed study (never on
another device's measurements), the confirmation on the held-out slice with intervals by problem, the preset and its
provenance, LoopSpec chosen where it is faster. The real runner, a kill and a resume run in a subprocess in
test_resume.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from optuna.trial import TrialState

import recdiff.device
import recdiff.trial
from recdiff.errors import RecdiffError
from recdiff.params import DiffusionParams
from recdiff.timing import clustered_median_interval
from recdiff.trial import TrialResult
from recdiff.tune.budget import Budget, confirmation_s, next_trial_s
from recdiff.tune.choice import Measured, since_gain
from recdiff.tune.confirm import confirm
from recdiff.tune.design import first, steps
from recdiff.tune.plan import compose
from recdiff.tune.tuning import ask, counted, holdout_factor, measure_grid, measured, open_tuning, search

CPU = "Acme(R) Rocket(TM) 9000 CPU @ 3.00GHz"   # no preset in conf/ was tuned on it


@pytest.fixture(autouse=True)
def acme(monkeypatch):
    monkeypatch.setattr(recdiff.device, "cpu_name", lambda: CPU)


def cells(speed: float, problems: int, rounds: int) -> list[list[float]]:
    """The fake's per-problem, per-round speed-ups: problem i at speed × (0.9 + 0.2 i / (problems - 1)) in every
    round, so that the problems, not the rounds, make the spread."""
    return [[speed * (0.9 + 0.2 * i / max(problems - 1, 1))] * rounds for i in range(problems)]


class FakeWork:
    device = "cpu"
    threads = None


def slow_loopspec(s) -> float:
    return 1.2


def fake_run_trial(calls: list, loopspec=slow_loopspec):
    """Static AR: speed-up 1, accuracy 1. Diffusion: speed-up 8 / (r_inner + 1); accuracy 0.5 (below the reference's
    interval) when epsilon > 0.1, else 1. LoopSpec: accuracy 1, speed-up ``loopspec(settings)`` (1.2: slower than the
    paper's defaults)."""

    def run(work, trial, output_dir):
        s, run = trial.sampler, trial.run
        calls.append({"sampler": s.name, **s.params()})
        if s.name == "static":
            speed, acc = 1.0, 1.0
        elif s.name == "loopspec":
            speed, acc = loopspec(s), 1.0
        else:
            speed, acc = 8 / (s.r_inner + 1), 0.5 if s.epsilon > 0.1 else 1.0
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        attrs = dict(accuracy_lo={1.0: 0.93, 0.5: 0.43}[acc], accuracy_hi=1.0, n_samples=48,
                     output_dir=str(output_dir), speedup=speed, speedup_lo=speed * 0.97, speedup_hi=speed * 1.03,
                     timing_batch=run.timing_batch, speed_samples=run.speed_samples, timing_rounds=run.repeats,
                     threads=1, speedup_cells=cells(speed, run.speed_samples, run.repeats))
        return TrialResult(accuracy=acc, tokens_per_s=30 * speed, attrs=attrs)

    return run


@pytest.fixture
def calls(monkeypatch) -> list:
    calls: list = []
    monkeypatch.setattr(recdiff.trial, "run_trial", fake_run_trial(calls))
    return calls


def tuning(tmp_path: Path, *extra: str, budget: Budget | None = None):
    tp = compose(["run.batch_size=1", "benchmark.limit=48", f"study.storage={tmp_path}/j.log",
                  f"study.artifact_dir={tmp_path}/art", f"tune.output_dir={tmp_path}/out",
                  "tune.trial_timeout_x=1000", *extra])   # the fake reference takes no time: no limit from it
    t = open_tuning(tp, budget or Budget(None), threads=1)
    t.load = t.load_holdout = lambda: FakeWork()
    return t


def reference(t) -> Measured:
    return Measured.of(measure_grid(t.tp.reference(), t.reference, t.load, t.tp.output_dir() / "ref", t.identity))


def test_the_search_starts_at_the_defaults_and_records_optunas_constraint(tmp_path, calls):
    t = tuning(tmp_path, "study.n_trials=6")
    ref = reference(t)
    assert (ref.speedup, ref.accuracy, ref.accuracy_lo) == (1.0, 1.0, 0.93) and calls[0]["r"] == 32
    lines: list[str] = []
    why = search(t, ref, ref.accuracy_lo, lines.append)
    assert why == "the study holds 6 trials (study.n_trials=6)"
    trials = t.search.get_trials()
    assert trials[0].params == t.tp.paper() == {
        "sampler": "diffusion", **{k: v for k, v in t.tp.defaults().params().items() if k in t.tp.search.study.search}}
    # then LoopSpec at its defaults, at the study's r, measured like any trial
    assert trials[1].params == {"sampler": "loopspec", "r_draft": 4, "r_draft2": None}
    assert trials[1].user_attrs["config"]["sampler"]["name"] == "loopspec" and calls[2]["r"] == 32
    for trial in trials:
        if trial.state == TrialState.COMPLETE:   # Optuna's constraint: ≤ 0 feasible
            acc = trial.values[0]
            assert trial.constraints == {"accuracy": pytest.approx(0.93 - acc)}
            assert trial.user_attrs["timing_batch"] == 1
    assert all(t_.user_attrs["speedup"] and t_.values[0] == 1.0 for t_ in t.search.best_trials)  # feasible only
    assert len(lines) == len(counted(t.search)) == 6
    assert lines[0].startswith("trial   0 speed-up 1.60x [1.55, 1.65] accuracy 1.000 [0.930, 1.000] feasible; "
                               "(the paper's defaults) | best: trial 0 1.60x")
    assert lines[1].startswith("trial   1 speed-up 1.20x [1.16, 1.24] accuracy 1.000 [0.930, 1.000] feasible; "
                               "sampler=loopspec | best: trial 0 1.60x")


def test_patience_stops_the_search(tmp_path, calls):
    t = tuning(tmp_path, "study.n_trials=40", "tune.patience=2")
    ref = reference(t)
    why = search(t, ref, ref.accuracy_lo, lambda line: None)
    assert why == "no gain in the last 2 trials (tune.patience=2)"
    history = measured(counted(t.search))
    assert since_gain(history, ref.accuracy_lo) == 2 and since_gain(history[:-1], ref.accuracy_lo) < 2


def test_the_first_trials_are_the_defaults_and_each_knob_moved_one_step(tmp_path, calls):
    t = tuning(tmp_path, "study.n_trials=18", "tune.patience=null")
    paper = t.tp.paper()
    assert paper == {"sampler": "diffusion",
                     **{k: v for k, v in DiffusionParams().params().items() if k in t.tp.search.study.search}}
    moves = steps(t.tp, paper)
    one_step = {}
    for move in moves:
        (key,) = [k for k in move if move[k] != paper[k]]     # one knob each, of the diffusion sampler
        one_step.setdefault(key, set()).add(move[key])
    # one declared value either way (recdiff/params.py); the schedule is left to the sampler (inert at β=0)
    assert one_step == {"r_inner": {2, 8}, "beta": {0.1}, "eta": {0.0, 0.3}, "epsilon": {0.01, 0.1},
                        "wavefront": {64, 256}, "headway": {2}, "init_scale": {0.5}}
    assert steps(t.tp, paper) == moves                          # seeded with study.seed
    # between declared values: to each of them
    assert {m["r_inner"] for m in steps(t.tp, {**paper, "r_inner": 3})} == {2, 4, 3}
    ref = reference(t)
    search(t, ref, ref.accuracy_lo, lambda line: None)
    ran = [tr.params for tr in counted(t.search)]
    head = first(t.tp)                        # the defaults, LoopSpec's (1.2x here) and its r_draft one step each way
    up_to = len(head) + moves.index({**paper, "r_inner": 2}) + 1      # then the moves until r_inner=2
    assert ran[:up_to] == [*head, *moves][:up_to]
    # the fake runs r_inner=2 at 2.67x [2.59, 2.75], beyond the defaults' [1.55, 1.65]: the climb goes on around it
    # (r_inner=1 is next to it)
    around = [m for m in steps(t.tp, {**paper, "r_inner": 2}) if m not in ran[:up_to]]
    assert ran[up_to:up_to + 3] == around[:3] and {**paper, "r_inner": 1} in around


def test_the_time_budget_keeps_the_confirmations_time(tmp_path, calls):
    clock = [0.0]
    t = tuning(tmp_path, "study.n_trials=20", budget=Budget(100.0, clock=lambda: clock[0]))
    ref = Measured(0, {}, 1.0, 0.97, 1.03, 1.0, 0.93, 1.0, seconds=30.0)
    # the reference took 30 s: the next trial is expected to take 45 s, the confirmation 1.5 × 90 s on a held-out slice
    # like the searched one; timed on 8 × 5 calls per round instead of 3 × 3, 40/9 times that
    assert next_trial_s([], 30.0) == 45.0 and confirmation_s(30.0, [None, None], 1.0) == pytest.approx(135.0)
    assert holdout_factor(t.tp) == pytest.approx(40 / 9)
    why = search(t, ref, 0.93, lambda line: None)
    # the reference, the paper's defaults, LoopSpec's and the choice: 1.5 × 40/9 × 4 × 30 s
    assert why.startswith("the time budget holds no further trial and the confirmation (0:00 of 1:40 used, 800 s")
    assert t.search.get_trials() == [] and calls == []


def test_a_budget_too_small_is_refused_before_the_reference_is_measured(tmp_path, calls, monkeypatch):
    """The least budget is the search's own reckoning: the reference's trial (here probed at 30 s), the first search
    trial (1.5 x 30 s) and the confirmation (1.5 x 40/9 x 4 x 30 s = 800 s); once measured, without the reference."""
    import recdiff.tune.tuning as tuning_module
    from recdiff.tune.__main__ import tune

    monkeypatch.setattr(tuning_module, "probe_reference_s", lambda t: 30.0)
    clock = [0.0]
    t = tuning(tmp_path, budget=Budget(874.0, clock=lambda: clock[0]))
    with pytest.raises(RecdiffError, match=r"cannot hold the reference's trial, the search's first trial and the "
                       r"confirmation: they need 875 s here \(the reference's trial probed at >= 30 s; the "
                       r"confirmation 4 such trials x 4.44 for the held-out slice x 1.5 margin\): give "
                       r"tune.time_budget_s=875 or more"):
        tuning_module.check_budget(t)
    tuning_module.check_budget(tuning(tmp_path, budget=Budget(875.0, clock=lambda: clock[0])))
    clock[0] = 10.0   # the time used counts
    with pytest.raises(RecdiffError, match="give tune.time_budget_s=885 or more"):
        tuning_module.check_budget(tuning(tmp_path, budget=Budget(875.0, clock=lambda: clock[0], start=0.0)))
    measured = Measured(0, {}, 1.0, 0.97, 1.03, 1.0, 0.93, 1.0, seconds=30.0)
    with pytest.raises(RecdiffError, match=r"the search's first trial and the confirmation: they need 855 s here "
                       r"\(the reference's trial took 30 s;"):
        tuning_module.check_budget(tuning(tmp_path, budget=Budget(854.0, clock=lambda: clock[0], start=0.0)), measured)
    # the command: one line (exit 2 in main) before anything is measured
    argv = ["run.batch_size=1", "benchmark.limit=48", f"study.storage={tmp_path}/j.log",
            f"study.artifact_dir={tmp_path}/art", f"tune.output_dir={tmp_path}/out", f"tune.preset_dir={tmp_path}/p",
            "tune.time_budget_s=60"]
    with pytest.raises(RecdiffError, match="give tune.time_budget_s=8"):
        tune(argv, start=time.monotonic())
    assert calls == [] and t.reference.get_trials() == []


def test_a_resumed_search_continues_the_study(tmp_path, calls):
    t = tuning(tmp_path, "study.n_trials=3")
    ref = reference(t)
    search(t, ref, ref.accuracy_lo, lambda line: None)
    again = tuning(tmp_path, "study.n_trials=5")
    assert Measured.of(measure_grid(again.tp.reference(), again.reference, again.load, tmp_path / "r",
                                    again.identity)).number == 0           # the reference is not measured again
    search(again, ref, ref.accuracy_lo, lambda line: None)
    assert len(counted(again.search)) == 5
    # the first trials, each once and in order, and nothing left waiting
    assert [tr.params for tr in again.search.get_trials()] == [*first(again.tp), *steps(again.tp, again.tp.paper())][:5]
    assert not again.search.get_trials(states=(TrialState.WAITING,))
    assert sum(c["sampler"] == "static" for c in calls) == 1


def test_the_confirmation_measures_reference_defaults_and_choice_on_the_held_out_slice(tmp_path, calls):
    t = tuning(tmp_path)
    chosen = t.tp.search.with_sampler(r_inner=1).sampler
    held = confirm(t, chosen, lambda line: None)
    assert [held[k].speedup for k in ("reference", "defaults", "loopspec", "chosen")] == [1.0, 1.6, 1.2, 4.0]
    trials = t.holdout.get_trials()
    assert [tr.user_attrs["config"]["benchmark"]["offset"] for tr in trials] == [48, 48, 48, 48]
    assert trials[2].user_attrs["config"]["sampler"] == {**trials[2].user_attrs["config"]["sampler"],
                                                         "name": "loopspec", "r": 32, "r_draft": 4, "r_draft2": None}
    # the reference is timed against itself in the fewest rounds; the others on 8 problems in 5 rounds
    assert [(tr.user_attrs["config"]["run"]["speed_samples"], tr.user_attrs["config"]["run"]["repeats"])
            for tr in trials] == [(1, 2), (8, 5), (8, 5), (8, 5)]
    # their intervals resample the problems (each with its rounds), not the recorded cells' ±3%
    for label, speed in (("defaults", 1.6), ("loopspec", 1.2), ("chosen", 4.0)):
        _, lo, hi = clustered_median_interval(cells(speed, 8, 5))
        assert (held[label].speedup_lo, held[label].speedup_hi) == (lo, hi) and lo < speed * 0.97
    # either sampler's defaults as the choice: measured once
    again = confirm(t, t.tp.defaults(), lambda line: None)
    assert again["chosen"].number == again["defaults"].number == 1 and len(t.holdout.get_trials()) == 4
    again = confirm(t, t.tp.sampler_of(t.tp.starts()[1]), lambda line: None)
    assert again["chosen"].number == again["loopspec"].number == 2 and len(t.holdout.get_trials()) == 4


def test_an_interrupted_trial_runs_again_before_anything_new(tmp_path, calls):
    from recdiff.study.record import claim_asked
    from recdiff.study.storage import fail_interrupted

    t = tuning(tmp_path, "study.n_trials=2")
    ref = reference(t)
    t.search.enqueue_trial({**t.tp.paper(), "r_inner": 16})
    lost = ask(t)                                            # as Ctrl-C leaves it: FAIL (interrupted), re-queued
    claim_asked(t.search, lost)
    fail_interrupted(t.search, lost)
    search(t, ref, ref.accuracy_lo, lambda line: None)
    done = counted(t.search)
    assert done[0].params == lost.params and done[0].system_attrs["failed_trial"] == lost.number
    assert done[1].params == t.tp.paper()                    # then the paper's defaults


def test_the_command_ends_with_its_table_and_a_preset_that_loads(tmp_path, calls, capsys):
    from recdiff.presets import read_preset
    from recdiff.trial.provenance import code_version
    from recdiff.tune.__main__ import tune

    argv = ["run.batch_size=1", "benchmark.limit=48", "study.n_trials=13", "tune.trial_timeout_x=1000",
            f"study.storage={tmp_path}/j.log",
            f"study.artifact_dir={tmp_path}/art", f"tune.output_dir={tmp_path}/out", f"tune.preset_dir={tmp_path}/p"]
    assert tune(argv, start=0.0) == 0
    out = capsys.readouterr().out
    # the first trials: the defaults, LoopSpec's three (1.2x), then one knob moved each; the fake runs r_inner=2 (the
    # 13th) at 8/3 = 2.67x, the defaults and every other move but r_inner=8 at 1.6x; on the held-out slice their
    # intervals are by problem, LoopSpec's defaults among them
    chosen, paper, looped, ref, runner, *_ = out.split("speed-up vs static r=32 [95% CI]")[1].splitlines()[1:]
    _, lo, hi = clustered_median_interval(cells(8 / 3, 8, 5))
    assert chosen.startswith("chosen") and f"2.67x [{lo:.2f}, {hi:.2f}]" in chosen and chosen.endswith("r_inner=2")
    _, lo, hi = clustered_median_interval(cells(1.6, 8, 5))
    assert paper.startswith("paper defaults") and f"1.60x [{lo:.2f}, {hi:.2f}]" in paper
    _, lo, hi = clustered_median_interval(cells(1.2, 8, 5))
    assert looped.startswith("loopspec defaults") and "held-out" in looped and f"1.20x [{lo:.2f}, {hi:.2f}]" in looped
    assert looped.endswith("sampler=loopspec")
    assert ref.startswith("static r=32 = reference") and "held-out" in ref
    assert runner.startswith("runner-up") and "searched" in runner and "[1.55, 1.65]" in runner   # as recorded
    assert "the chosen setting beats the paper's defaults beyond the intervals" in out
    path = tmp_path / "p" / "embedded-cpu-acme-rocket-b1.yaml"
    preset = read_preset(path)
    assert preset.r_inner == 2 and preset.epsilon == 0.03
    p = preset.preset
    assert p.result.startswith("2.67x [") and p.device == f"cpu ({CPU})" and p.name == path.stem
    assert (p.version, p.commit) == code_version()
    assert (p.timing_batch, p.speed_samples, p.repeats, p.timing_threads) == (1, 3, 3, 1)
    assert (p.trials_complete, p.trials_total, p.held_out_speed_samples, p.held_out_repeats) == (13, 13, 8, 5)
    assert "/sampler/diffusion@sampler" in path.read_text()
    # a second run is refused before it searches: the preset is there (exit 2, one line naming it)
    before = path.read_text()
    with pytest.raises(RecdiffError, match=f"preset {path} exists: tune.overwrite=true replaces it"):
        tune(argv, start=0.0)
    assert path.read_text() == before


def test_loopspec_wins_where_it_is_faster_and_its_preset_loads_for_generate(tmp_path, monkeypatch, capsys):
    """LoopSpec fastest at r_draft = 2: the climb moves from its defaults to r_draft = 2, which is chosen, confirmed
    beside the paper's defaults and LoopSpec's own, and written as a LoopSpec preset."""
    from recdiff.presets import load_preset, read_preset
    from recdiff.tune.__main__ import tune

    depth = {1: 2.0, 2: 5.0, 4: 4.0, 8: 3.0, 16: 2.0}
    calls: list = []
    monkeypatch.setattr(recdiff.trial, "run_trial", fake_run_trial(calls, lambda s: depth[s.r_draft]))
    argv = ["run.batch_size=1", "benchmark.limit=48", "study.n_trials=6", "tune.trial_timeout_x=1000",
            f"study.storage={tmp_path}/j.log", f"study.artifact_dir={tmp_path}/art", f"tune.output_dir={tmp_path}/out",
            f"tune.preset_dir={tmp_path}/p", "tune.name=mine"]
    assert tune(argv, start=0.0) == 0
    out = capsys.readouterr().out
    chosen, paper, looped, ref, *_ = out.split("speed-up vs static r=32 [95% CI]")[1].splitlines()[1:]
    assert chosen.startswith("chosen") and "5.00x [" in chosen and chosen.endswith("sampler=loopspec r_draft=2")
    assert paper.startswith("paper defaults") and looped.startswith("loopspec defaults") and "4.00x [" in looped
    assert "the chosen setting beats the paper's defaults beyond the intervals" in out
    path = tmp_path / "p" / "mine.yaml"
    text = path.read_text()
    assert "/sampler/loopspec@sampler" in text and "# The loopspec sampler tuned for" in text
    assert "r_draft2: null" in text                     # every searched knob stated, one early readout
    preset = read_preset(path)
    assert (preset.name, preset.r, preset.r_draft, preset.r_draft2) == ("loopspec", 32, 2, None)
    assert preset.preset.name == "mine" and preset.preset.result.startswith("5.00x [")
    assert load_preset(path) == {"sampler": "loopspec", "r": 32, "r_draft": 2, "init_scale": 0.0,
                                 "kv_cache": "per_step"}


def test_a_preset_written_meanwhile_is_not_replaced(tmp_path, calls, monkeypatch):
    """The file appears while the tune runs (another tune of the same name): the write is refused as well."""
    import recdiff.tune.confirm
    from recdiff.tune.__main__ import tune

    path = tmp_path / "p" / "mine.yaml"
    real = recdiff.tune.confirm.confirm

    def confirm_then_another_tune_writes(*args):
        out = real(*args)
        path.parent.mkdir(exist_ok=True)
        path.write_text("# another tune's\n")
        return out

    monkeypatch.setattr(recdiff.tune.confirm, "confirm", confirm_then_another_tune_writes)
    argv = ["run.batch_size=1", "benchmark.limit=48", "study.n_trials=2", "tune.trial_timeout_x=1000",
            f"study.storage={tmp_path}/j.log", f"study.artifact_dir={tmp_path}/art", f"tune.output_dir={tmp_path}/out",
            f"tune.preset_dir={tmp_path}/p", "tune.name=mine"]
    with pytest.raises(RecdiffError, match=f"preset {path} exists: tune.overwrite=true replaces it"):
        tune(argv, start=0.0)
    assert path.read_text() == "# another tune's\n"
    assert tune([*argv, "tune.overwrite=true"], start=0.0) == 0 and path.read_text().startswith("# @package _global_")


def test_a_resumed_tune_never_reuses_another_devices_measurements(tmp_path, calls, monkeypatch):
    """Two CPUs of one family share the study's default name (its slug); the study's identity holds the device's
    name, so the second machine is refused in one line before it measures anything."""
    t = tuning(tmp_path)
    reference(t)
    (trial,) = t.reference.get_trials()
    assert trial.user_attrs["identity"]["device"] == {"kind": "cpu", "name": CPU}
    monkeypatch.setattr(recdiff.device, "cpu_name", lambda: "Acme(R) Rocket(TM) 9100 CPU @ 3.20GHz")
    with pytest.raises(RecdiffError) as err:
        tuning(tmp_path)
    assert str(err.value).startswith(
        f"study '{t.reference.study_name}' holds trials measured otherwise (trial 0): device.name='Acme(R) Rocket(TM) "
        f"9100 CPU @ 3.20GHz' here, '{CPU}' there.")
    assert len(calls) == 1 and len(t.reference.get_trials()) == 1
