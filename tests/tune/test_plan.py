"""The tune's command line: the sweep's plan plus ``tune.*``, the names of its studies and preset (with the device's
slug), the held-out slice after the searched one, and bad input in one line (exit 2) before any model loads: an
existing preset file too, before the search spends any time."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

import recdiff.device
from recdiff.errors import RecdiffError
from recdiff.params import DiffusionParams, LoopSpecParams
from recdiff.tune.plan import PRESET_DIR, compose

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def epyc(monkeypatch):
    """The tests' CPU, whatever the machine's (one no preset in conf/ was tuned on)."""
    monkeypatch.setattr(recdiff.device, "cpu_name", lambda: "Acme(R) Rocket(TM) 9000 CPU @ 3.00GHz")


def test_defaults_search_the_diffusion_knobs_at_the_batch_asked():
    tp = compose(["run.batch_size=1"])
    plan = tp.search
    assert plan.study.name == "tune-embedded-compose-cpu-acme-rocket-b1" and plan.study.mode.value == "search"
    assert plan.study.search == ["r_inner", "beta", "beta_schedule", "eta", "epsilon", "wavefront", "headway",
                                 "init_scale"]
    # the batch asked is the speed's (timed calls); the accuracy pass decodes 32 side by side whatever it is
    assert (plan.run.timing_batch, plan.run.batch_size, plan.run.timeout_s, plan.run.progress) == (1, 32, None, False)
    assert tp.preset_name() == "embedded-cpu-acme-rocket-b1"
    assert tp.preset_path() == PRESET_DIR / "embedded-cpu-acme-rocket-b1.yaml"
    # without a batch size: the device's default, timed as a batch's throughput; another study and preset
    b32 = compose([])
    assert (b32.batch, b32.search.run.timing_batch, b32.search.study.name) == (
        32, 32, "tune-embedded-compose-cpu-acme-rocket-b32")
    assert b32.preset_name() == "embedded-cpu-acme-rocket-b32"
    assert b32.hardware().label == "cpu (Acme(R) Rocket(TM) 9000 CPU @ 3.00GHz)"


def test_the_derived_plans():
    tp = compose(["run.batch_size=1", "benchmark.limit=48", "benchmark.offset=8"])
    ref = tp.reference()
    assert ref.sampler.name == "static" and ref.sampler.r == 32 and ref.study.name.endswith("-b1-reference")
    assert ref.study.mode.value == "grid" and ref.benchmark == tp.search.benchmark
    held = tp.holdout(tp.defaults())
    assert (held.benchmark["offset"], held.benchmark["limit"]) == (56, 48)   # right after the searched slice
    # timed on at least 8 problems in at least 5 rounds (the search: 3 × 3), so that its interval can resample problems
    assert held.study.name.endswith("-b1-holdout") and (held.run.speed_samples, held.run.repeats) == (8, 5)
    assert (tp.search.run.speed_samples, tp.search.run.repeats) == (3, 3)
    more = compose(["run.batch_size=1", "run.speed_samples=12", "run.repeats=6"])
    assert (more.holdout(more.defaults()).run.speed_samples, more.holdout(more.defaults()).run.repeats) == (12, 6)
    ref = tp.holdout(tp.search.run.reference_sampler())
    assert (ref.run.speed_samples, ref.run.repeats) == (1, 2)                # speed-up 1 by definition
    defaults = tp.defaults()
    assert defaults.params() == DiffusionParams().params()
    other = compose(["run.batch_size=1", "tune.holdout_limit=20", "tune.holdout_offset=500", "tune.holdout_repeats=3",
                     "tune.holdout_speed_samples=4", "sampler.r_inner=1", "sampler.r=16"])
    held = other.holdout(other.defaults())
    assert (held.benchmark["offset"], held.benchmark["limit"], held.run.speed_samples, held.run.repeats) == (
        500, 20, 4, 3)
    # the paper's defaults of the searched knobs, the other settings as given
    assert (other.defaults().r_inner, other.defaults().r) == (4, 16)


def test_the_search_covers_both_samplers_at_the_studys_r():
    from optuna.distributions import CategoricalDistribution

    tp = compose(["run.batch_size=1"])
    assert tp.options.loopspec == ["r_draft", "r_draft2"] and tp.samplers() == ["diffusion", "loopspec"]
    space = tp.space()
    assert space["diffusion"] == tp.search.search_space()
    # LoopSpec's readout depths at r = 32: the divisors below it (r_draft2 also null: one early readout)
    assert space["loopspec"] == {"r_draft": CategoricalDistribution([1, 2, 4, 8, 16]),
                                 "r_draft2": CategoricalDistribution([None, 2, 4, 8, 16])}
    assert tp.paper() == {"sampler": "diffusion", **{k: v for k, v in DiffusionParams().params().items()
                                                     if k in tp.search.study.search}}
    assert tp.starts() == [tp.paper(), {"sampler": "loopspec", "r_draft": 4, "r_draft2": None}]
    # a setting's plan: LoopSpec at the study's r with the setting's knobs, its searched keys its own
    plan = tp.trial_plan({"sampler": "loopspec", "r_draft": 8, "r_draft2": 16})
    assert plan.sampler == LoopSpecParams(r=32, r_draft=8, r_draft2=16) and plan.study.search == ["r_draft", "r_draft2"]
    assert (plan.run, plan.benchmark, plan.study.name) == (tp.search.run, tp.search.benchmark, tp.search.study.name)
    diffusion = tp.trial_plan({**tp.paper(), "r_inner": 1})
    assert diffusion.sampler == dataclasses.replace(tp.search.sampler, r_inner=1)
    # another r: its divisors; LoopSpec's default r_draft = 4 where it divides r, else the depth nearest it
    r24 = compose(["run.batch_size=1", "sampler.r=24"])
    assert r24.ladders("loopspec") == {"r_draft": [1, 2, 3, 4, 6, 8, 12], "r_draft2": [None, 2, 3, 4, 6, 8, 12]}
    r6 = compose(["run.batch_size=1", "sampler.r=6", "sampler.r_inner=2"])
    assert r6.loopspec() == LoopSpecParams(r=6, r_draft=3)
    # the diffusion sampler alone, as before LoopSpec
    alone = compose(["run.batch_size=1", "tune.loopspec=[]"])
    assert alone.samplers() == ["diffusion"] and list(alone.space()) == ["diffusion"]
    assert alone.starts() == [alone.paper()]


@pytest.mark.parametrize("argv, message", [
    (["tune.budget=5"], "unknown config key 'tune.budget'"),
    (["tune.patience=soon"], "tune.patience"),
    (["tune.time_budget_s=-1"], "tune.time_budget_s=-1.0 must be > 0"),
    (["sampler=static"], "sampler=static: the tune starts from the diffusion sampler's node"),
    (["sampler=loopspec"], "sampler=loopspec: the tune starts from the diffusion sampler's node"),
    (["tune.loopspec=[r_draft,r]"], "tune.loopspec: 'r' is not a LoopSpec knob the tune searches (r_draft, "
                                    "r_draft2;"),
    (["study.algorithm=grid"], "study.algorithm=grid: a grid holds one sampler's knobs"),
    (["study.space.r_draft.low=20"], "sampler.r=32: LoopSpec's r_draft must divide r below it within "
                                     "study.space.r_draft"),
    (["study=grid"], "study.mode=grid: the tune is a search"),
    (["tune.holdout_offset=100"], "the held-out slice overlaps the searched one"),
    (["tune.name=a/b"], "tune.name='a/b'"),
    (["run.batch_size=-1"], "run.batch_size=-1 must be an integer >= 1"),
    (["tune.holdout_speed_samples=1"], "tune.holdout_speed_samples=1 must be >= 2"),
    (["run.batch_size=1", "tune.holdout_limit=1"], "tune.holdout_limit=1: the held-out interval resamples the timed "
                                                   "problems, so it needs at least two"),
    (["tune.overwrite=maybe"], "tune.overwrite"),
])
def test_bad_input_is_one_line(argv, message):
    with pytest.raises(RecdiffError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        compose(argv)
    assert "\n" not in str(err.value)


@pytest.mark.slow
@pytest.mark.parametrize("arg, line", [
    ("sampler.r_innr=2", "error: unknown config key 'sampler.r_innr' (did you mean 'r_inner'?)"),
    ("tune.time_budget=600", "error: unknown config key 'tune.time_budget' (did you mean 'time_budget_s'?)"),
])
def test_the_command_refuses_a_bad_override_in_one_line_with_exit_2(tmp_path, arg, line):
    proc = subprocess.run([sys.executable, "-m", "recdiff.tune", arg, f"study.storage={tmp_path}/j.log"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [line]
    assert not (tmp_path / "j.log").exists()       # nothing opened, nothing recorded


@pytest.mark.slow
@pytest.mark.skipif(not (REPO / "recdiff" / "assets" / "embedded" / "model.safetensors").exists(),
                    reason="embedded model not shipped")
def test_a_budget_too_small_is_refused_in_one_line_before_anything_is_measured(tmp_path):
    """The issue's command: a minute cannot hold the reference's trial, the search's first and the confirmation;
    one line names the least budget (from a probed call of the reference), and nothing is measured."""
    import re

    import optuna

    proc = subprocess.run([sys.executable, "-m", "recdiff.tune", "run.batch_size=1", "tune.time_budget_s=60",
                           f"study.storage={tmp_path}/j.log", f"study.artifact_dir={tmp_path}/art",
                           f"tune.output_dir={tmp_path}/out", f"tune.preset_dir={tmp_path}/p"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    found = re.fullmatch(r"error: tune.time_budget_s=60 cannot hold the reference's trial, the search's first trial "
                         r"and the confirmation: they need (\d+) s here \(the reference's trial probed at >= (\d+) s; "
                         r"the confirmation 4 such trials x 4.44 for the held-out slice x 1.5 margin\): give "
                         r"tune.time_budget_s=(\d+) or more", line)
    assert found, line
    need, probed, give = map(int, found.groups())
    # the reference's trial, the first search trial (1.5 of it), the confirmation (1.5 x 40/9 x 4 of it): 29.17 of it
    assert need == give > 60 and need >= int(probed * (1 + 1.5 + 1.5 * 40 / 9 * 4)) - 1
    from recdiff.study import open_storage

    storage = open_storage(str(tmp_path / "j.log"))
    assert all(not optuna.load_study(study_name=s, storage=storage).get_trials()
               for s in optuna.get_all_study_names(storage))           # nothing measured
    assert not (tmp_path / "p").exists()


def test_an_existing_preset_is_refused_before_the_search_unless_told(tmp_path):
    where = ["run.batch_size=1", f"tune.preset_dir={tmp_path}"]
    assert compose(where).preset_path() == tmp_path / "embedded-cpu-acme-rocket-b1.yaml"
    (tmp_path / "embedded-cpu-acme-rocket-b1.yaml").write_text("# tuned before\n")
    with pytest.raises(RecdiffError) as err:
        compose(where)
    assert str(err.value) == (f"preset {tmp_path}/embedded-cpu-acme-rocket-b1.yaml exists: tune.overwrite=true "
                              "replaces it, tune.name=<name> writes another")
    assert compose([*where, "tune.overwrite=true"]).options.overwrite is True
    assert compose([*where, "tune.name=mine"]).preset_path() == tmp_path / "mine.yaml"
