"""issue 32: every trial timed paired against the study's reference (recdiff/trial/measure.py): a reference that
cannot be timed makes the trial FAIL (never a speed-up of 0 or infinity); how run.repeats, run.reference and
run.timing_threads enter the configuration's hash and the study's identity; bad settings in one line.

The attributes every COMPLETE trial records, and the reference's own speed-up of 1, are checked on a real sweep with
its baselines in tests/sweep/test_baselines.py."""

from __future__ import annotations

import pytest
from optuna.trial import TrialState

from recdiff.errors import RecdiffError
from recdiff.study.identity import config_hash, conflict, identity_from_config, key

from .conftest import TINY, compose_plan, load, requires_fixture, run_sweep
from .faults import fault_args

pytestmark = pytest.mark.slow


def ident(*overrides: str) -> dict:
    return identity_from_config(compose_plan(list(overrides)).as_dict(), weights="w", dtype="float32")


@requires_fixture
def test_a_trial_whose_reference_fails_is_fail_not_a_speedup(tmp_path):
    where = [f"study.storage={tmp_path}/j.log", f"study.artifact_dir={tmp_path}/art", "study.name=ref"]
    proc = run_sweep([*fault_args("reference"), *TINY, "sampler=static", "sampler.r=2", *where,
                      f"hydra.run.dir={tmp_path}/run"], check=False)
    assert proc.returncode == 1, proc.stderr[-2000:]    # the sweep completed no trial
    (trial,) = load(f"{tmp_path}/j.log", "ref").get_trials()
    assert trial.state == TrialState.FAIL and trial.values is None
    assert trial.user_attrs["fail_kind"] == "error"
    assert trial.user_attrs["fail_reason"].startswith("ReferenceTimingError: reference measurement failed: static "
                                                      "sampler: r=0 must be")   # not PRUNED as the trial's settings
    assert not {"speedup", "speedup_lo", "speedup_hi", "tokens_per_s_lo"} & set(trial.user_attrs)
    # the same configuration with a reference that works completes: the failure was the reference's
    run_sweep([*TINY, "sampler=static", "sampler.r=2", *where, f"hydra.run.dir={tmp_path}/again"])
    done = load(f"{tmp_path}/j.log", "ref").get_trials(states=(TrialState.COMPLETE,))
    assert len(done) == 1 and 0 < done[0].user_attrs["speedup"] < float("inf")


def test_repeats_do_not_remeasure_a_configuration_and_the_reference_is_the_studys():
    base = compose_plan()
    # more rounds only narrow the intervals: the same configuration, the same identity
    assert config_hash(compose_plan(["run.repeats=7"])) == config_hash(base)
    assert key(ident("run.repeats=7")) == key(ident())
    # the default reference, however written, leaves the identity as studies before paired timing had it
    assert "reference" not in ident()["run"] and "timing_threads" not in ident()["run"]
    assert key(ident("run.reference='static r=32 init_scale=0.0'")) == key(ident())
    # another reference or thread count: another study (every speed-up in a study is against one reference)
    assert config_hash(compose_plan(["run.reference='static r=16'"])) == config_hash(base)
    assert [d[:3] for d in conflict(ident(), ident("run.reference='static r=16'"))] == [
        ("run.reference", "static r=32", "static r=16")]
    assert [d[0] for d in conflict(ident(), ident("run.timing_threads=2"))] == ["run.timing_threads"]
    # study-wide: a second benchmark of the study may not bring another reference either
    assert [d[0] for d in conflict(ident(), ident("benchmark=gsm8k", "run.reference=adaptive"))] == ["run.reference"]


@pytest.mark.parametrize("override, message", [
    ("run.repeats=1", "run.repeats=1 must be an integer >= 2"),
    ("run.timing_threads=0", "run.timing_threads=0 must be >= 1"),
    ("run.reference=statc", "run.reference='statc': 'statc' must start with a sampler (static, adaptive, "),
    ("run.reference='static r_inner=2'", "run.reference='static r_inner=2': 'r_inner=2' is not <setting>=<value> of "
                                         "the static sampler (it has r, init_scale, kv_cache)"),
    ("run.reference='diffusion r_inner=64'", "run.reference='diffusion r_inner=64': diffusion sampler: r_inner=64 "
                                             "exceeds r=32"),
])
def test_timing_settings_are_checked_in_one_line(override, message):
    with pytest.raises(RecdiffError) as err:
        compose_plan([override])
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_the_reference_trial_is_the_one_whose_sampler_is_the_reference():
    from recdiff.trial.measure import reference_gen

    base = {"max_new_tokens": 8}
    plan = compose_plan(["sampler=static"])   # static at its defaults: r=32, the default reference
    assert reference_gen(plan.trial, base) is None
    assert reference_gen(compose_plan(["sampler=static", "sampler.r=16"]).trial, base) == {
        **base, "sampler": "static", "r": 32, "init_scale": 0.0, "kv_cache": "shared"}
    other = compose_plan(["run.reference='diffusion r_inner=8'"])
    assert reference_gen(other.trial, base)["r_inner"] == 8
    assert reference_gen(compose_plan(["run.reference='diffusion r_inner=4'"]).trial, base) is None
