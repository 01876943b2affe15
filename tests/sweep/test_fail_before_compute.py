"""Everything checkable without the model fails before it loads: one line, exit code 2, nothing recorded. A sweep
that completes no trial exits non-zero. Hydra's own flags work next to overrides."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from recdiff.errors import RecdiffError
from tests.faults import fault_args
from tests.sweep_helpers import TINY, compose_plan, load, requires_fixture, run_sweep


def recorded(storage: Path) -> int:
    """Trials in every study of the journal (0 when there is none)."""
    if not storage.exists():
        return 0
    from recdiff.study import open_storage

    s = open_storage(str(storage))
    return sum(len(optuna.load_study(study_name=n, storage=s).trials) for n in optuna.get_all_study_names(s))


@pytest.mark.slow
@pytest.mark.parametrize("overrides, message", [
    # the sampler's own rules, as recdiff.generate applies them (r_inner > r used to become a PRUNED trial)
    (["sampler.r_inner=64"], "error: diffusion sampler: r_inner=64 exceeds r=32"),
    (["sampler=static", "sampler.r=0"], "error: static sampler: r=0 must be an integer in [1, 1024]"),
    (["sampler.r=100000"], "error: diffusion sampler: r=100000 must be an integer in [1, 1024]"),
    (["study=search", "study.space.beta.high=2"],
     "error: study.space.beta: diffusion sampler: beta=2.0 must be in [0, 1]"),
    (["run.temperature=-1"], "error: run.temperature=-1.0 must be a number >= 0 (0 = greedy)"),
    (["run.top_p=0"], "error: run.top_p=0.0 must be in (0, 1]"),
    (["run.max_new_tokens=0"], "error: run.max_new_tokens=0 must be an integer >= 1"),
    (["study.grace_period=5", "study.heartbeat_interval=10"], "error: study.grace_period=5 must exceed"),
    # write access, before the evaluation (an unwritable artifact dir used to leave a COMPLETE trial behind)
    (["study.artifact_dir={tmp}/blocker/art"], "error: study.artifact_dir {tmp}/blocker/art is not writable"),
    (["study.storage={tmp}/blocker/j.log"], "error: study.storage directory {tmp}/blocker is not writable"),
])
@requires_fixture
def test_a_configuration_error_is_one_line_and_records_nothing(tmp_path, overrides, message):
    (tmp_path / "blocker").write_text("a file where a directory should be")
    storage = tmp_path / "j.log"
    args = [f"study.storage={storage}", f"study.artifact_dir={tmp_path}/art", f"hydra.run.dir={tmp_path}/run",
            *TINY, *(o.format(tmp=tmp_path) for o in overrides)]
    for _ in range(2 if "r_inner=64" in overrides[0] else 1):   # a rerun records nothing either
        proc = run_sweep(args, check=False, timeout=120)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "Traceback" not in proc.stderr
        assert proc.stderr.startswith(message.format(tmp=tmp_path)), proc.stderr
        assert recorded(storage) == 0
    assert not (tmp_path / "run" / "result.json").exists()


@pytest.mark.slow
@requires_fixture
def test_a_sweep_that_completes_no_trial_exits_non_zero(tmp_path):
    args = [*TINY, "sampler=static", "sampler.r=1", "study.name=failing", f"study.storage={tmp_path}/j.log",
            f"study.artifact_dir={tmp_path}/art"]
    proc = run_sweep(["-m", *fault_args("error", "oom"), *args, f"hydra.sweep.dir={tmp_path}/all"], check=False)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: no trial of this sweep completed (2 FAIL); see {tmp_path}/all")
    # one good trial among failures: success; a single run (no -m) that fails: failure
    assert run_sweep(["-m", *fault_args("error", None), *args, f"hydra.sweep.dir={tmp_path}/mixed"]).returncode == 0
    single = run_sweep([*args, *fault_args("error"), "sampler.r=2", f"hydra.run.dir={tmp_path}/one"], check=False)
    assert single.returncode == 1 and "no trial of this sweep completed (1 FAIL)" in single.stderr
    states = [t.state for t in load(f"{tmp_path}/j.log", "failing").get_trials()]
    assert states.count(TrialState.FAIL) == 4 and states.count(TrialState.COMPLETE) == 1
    # a re-run that only skips what is COMPLETE is fine
    assert run_sweep([*args, f"hydra.run.dir={tmp_path}/again"]).returncode == 0
    assert json.loads((tmp_path / "again" / "result.json").read_text())["skipped_duplicate"] is True


def test_run_settings_are_checked_with_the_api_rules():
    compose_plan()
    for override, message in [("run.temperature=nan", "run.temperature=nan must be a number >= 0"),
                              ("run.timeout_s=0", "run.timeout_s=0.0 must be a number > 0"),
                              ("run.threads=0", "run.threads=0 must be >= 1"),
                              ("run.warmup=-1", "run.warmup=-1 must be >= 0")]:
        with pytest.raises(RecdiffError, match=message.replace("(", r"\(")):
            compose_plan([override])


def test_a_search_checks_fixed_settings_and_range_ends_but_leaves_combinations_to_the_trials():
    search = ["study=search", "study.search=[r_inner,beta]"]
    # r_inner up to 32 with r=8: some proposals are invalid combinations, which the trials prune
    compose_plan([*search, "sampler.r=8"])
    with pytest.raises(RecdiffError, match=r"diffusion sampler: eta=1.5 must be in \[0, 1\)"):
        compose_plan([*search, "sampler.eta=1.5"])
    with pytest.raises(RecdiffError, match=r"study.space.r_inner: diffusion sampler: r_inner=0 must be"):
        compose_plan([*search, "study.space.r_inner.low=0", "study.space.r_inner.log=false"])
    # a grid trial is one fixed combination: all of the sampler's rules apply
    with pytest.raises(RecdiffError, match=r"headway=8 exceeds wavefront=4"):
        compose_plan(["sampler.wavefront=4", "sampler.headway=8"])
