"""How the paired timing's settings enter a trial (issue 32), without a sweep: run.repeats only narrows intervals (not
part of the configuration's hash), run.reference and run.timing_threads are part of the study's identity, the
reference's own trial is the one whose sampler is the reference, and bad settings are one line. A reference that
cannot be timed, on a real sweep, is test_paired_timing.py (slow)."""

from __future__ import annotations

import pytest

from recdiff.errors import RecdiffError
from recdiff.study.identity import config_hash, conflict, identity_from_config, key
from tests.sweep_helpers import compose_plan


def ident(*overrides: str) -> dict:
    return identity_from_config(compose_plan(list(overrides)).as_dict(), weights="w", dtype="float32")


@pytest.mark.slow
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
                                         "the static sampler (it has r, init_scale, kv_cache, exit_threshold)"),
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
