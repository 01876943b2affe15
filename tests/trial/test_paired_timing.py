"""issue 32: every trial timed paired against the study's reference (recdiff/trial/measure.py): a reference that
cannot be timed makes the trial FAIL (never a speed-up of 0 or infinity), on a real sweep. How run.repeats,
run.reference and run.timing_threads enter the configuration's hash and the study's identity, and bad settings in one
line, are tested without a sweep in test_timing_settings.py (fast tier).

The attributes every COMPLETE trial records, and the reference's own speed-up of 1, are checked on a real sweep with
its baselines in tests/study/test_baselines.py."""

from __future__ import annotations

import pytest
from optuna.trial import TrialState

from tests.faults import fault_args
from tests.sweep_helpers import TINY, load, requires_fixture, run_sweep

pytestmark = pytest.mark.slow


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
