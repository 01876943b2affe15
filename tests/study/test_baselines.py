"""issue 14: every grid study records the paper's baselines once per identity, later sweeps reuse them, and the sweep
ends with the speed-up table computed from the recorded trials."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from optuna.trial import TrialState

from tests.sweep_helpers import load, requires_fixture, run_sweep

pytestmark = pytest.mark.slow

# The fixture checkpoint with a tiny slice; the baselines on (study.baselines defaults to true).
ARGS = ["model=fixture", "benchmark=arith", "benchmark.limit=2", "run.max_new_tokens=8", "run.speed_samples=1",
        "run.warmup=0", "run.threads=1", "run.progress=false", "sampler.r=8", "study.name=baselines"]
TIMING = ("tokens_per_s_lo", "tokens_per_s_hi", "speedup", "speedup_lo", "speedup_hi", "reference_tokens_per_s",
          "timing_rounds", "threads")
EXPECTED = Counter({("static", 32): 1, ("static", 4): 1, ("static", 8): 1, ("adaptive", 32): 1,
                    ("speculative", 32): 1, ("loopspec", 32): 1})


def _table(text: str) -> dict[int, str]:
    """Rows of the closing table, by trial number."""
    head = text.index("relative to Static AR (r=32)")
    rows = {}
    for line in text[head:].splitlines()[2:]:
        m = re.match(r"\s*(\d+)\s{2}", line)
        if not m:
            break
        rows[int(m.group(1))] = line
    return rows


@requires_fixture
def test_baselines_are_recorded_once_reused_and_tabulated(tmp_path):
    where = [f"study.storage={tmp_path}/journal.log", f"study.artifact_dir={tmp_path}/art"]
    # two joblib workers share the baselines through the claims: each is run by one of them
    first = run_sweep(["-m", "sampler.r_inner=1,2", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *ARGS, *where,
                       f"hydra.sweep.dir={tmp_path}/one"], timeout=300)
    study = load(str(tmp_path / "journal.log"), "baselines")
    done = study.get_trials(states=(TrialState.COMPLETE,))
    base = [t for t in done if t.user_attrs.get("baseline")]
    assert Counter((t.params["sampler"], t.params["r"]) for t in base) == EXPECTED
    assert sorted(t.params["r_inner"] for t in done if not t.user_attrs.get("baseline")) == [1, 2]
    assert len({t.user_attrs["config_hash"] for t in done}) == len(done) == 8          # nothing recorded twice
    # every baseline at its sampler's defaults: one K/V per position shared by the recurrences, but LoopSpec's, whose
    # every depth reads its own (per_step only)
    assert all(t.params.get("kv_cache") == ("per_step" if t.params["sampler"] == "loopspec" else "shared")
               and t.params.get("init_scale") == 0.0 for t in base)
    (spec,) = [t for t in base if t.params["sampler"] == "loopspec"]
    assert spec.params["r_draft"] == 4 and "r_draft2" not in spec.params
    assert spec.user_attrs["q1_acceptance"] is not None and spec.user_attrs["peak_lanes"] >= 2
    assert len(_table(first.stdout)) == 8
    assert "speed-up vs Static AR (r=32) [95% CI]" in first.stdout

    # every COMPLETE trial carries the paired timing (issue 32): its interval around tokens/s, the speed-up against
    # the reference timed in the same rounds, on one thread; the reference's own trial is at 1 within its interval
    for t in done:
        a, tps = t.user_attrs, t.values[1]
        assert {k for k in TIMING if k not in a} == set(), t.number
        assert a["tokens_per_s_lo"] <= tps <= a["tokens_per_s_hi"]
        assert a["speedup_lo"] <= a["speedup"] <= a["speedup_hi"]
        assert a["timing_rounds"] == 3 and a["threads"] == 1 and a["reference_tokens_per_s"] > 0
        assert 0 < a["speedup"] < float("inf")
    (ref,) = [t for t in base if t.params["sampler"] == "static" and t.params["r"] == 32]
    assert ref.user_attrs["speedup"] == 1.0 and ref.user_attrs["speedup_lo"] <= 1.0 <= ref.user_attrs["speedup_hi"]
    assert ref.user_attrs["reference_tokens_per_s"] > 0

    # a second sweep on the study: one new trial, the baselines reused (not run again)
    second = run_sweep(["-m", "sampler.r_inner=2,4", *ARGS, *where, f"hydra.sweep.dir={tmp_path}/two"])
    assert "baseline " not in second.stdout + second.stderr
    study = load(str(tmp_path / "journal.log"), "baselines")
    done = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(done) == 9 and sum(bool(t.user_attrs.get("baseline")) for t in done) == 6
    assert not (tmp_path / "two" / "baselines").exists()

    # the closing table: one row per trial, speed-up and accuracy change computed from the recorded values
    rows = _table(second.stdout)
    assert sorted(rows) == sorted(t.number for t in done)
    (ref,) = [t for t in base if t.params["sampler"] == "static" and t.params["r"] == 32]
    assert "= reference" in rows[ref.number]
    for t in done:
        # the paired speed-up the trial recorded (recdiff.timing.paired_timing), never tokens/s ÷ the reference's
        # tokens/s measured at another moment: "unpaired" for a trial that has none
        a = t.user_attrs
        speedup = f"{a['speedup']:.2f}x [{a['speedup_lo']:.2f}, {a['speedup_hi']:.2f}]"
        delta = 100 * (t.values[0] - ref.values[0])
        cells = re.split(r"\s{2,}", rows[t.number].strip())   # columns: two spaces or more; cells hold single ones
        assert cells[-2] == speedup and cells[-1].split(" [")[0] == f"{delta:+.1f}", (t.number, rows[t.number])
        assert cells[-3].split(" [")[0] == f"{t.values[1]:.1f}"
        lo, hi = a["accuracy_lo"], a["accuracy_hi"]
        assert f"{t.values[0]:.3f} [{lo:.3f}, {hi:.3f}]" in rows[t.number]


@requires_fixture
def test_other_studies_of_the_storage_share_identical_configurations(tmp_path):
    """study.reuse: a configuration COMPLETE in another study under the same identity is copied (reused_from), not
    measured again; another identity (here another slice) or study.reuse=false measures it."""
    where = [f"study.storage={tmp_path}/journal.log", f"study.artifact_dir={tmp_path}/art"]
    # two tokens per problem: what is compared here is which trials were measured, not the measurements
    grid = [a for a in ARGS[:-1] if not a.startswith("run.max_new_tokens=")] + [
        "run.max_new_tokens=2", "study.baselines=false", "sampler.r_inner=2"]
    run_sweep([*grid, "study.name=a", *where, f"hydra.run.dir={tmp_path}/a"])
    (orig,) = load(str(tmp_path / "journal.log"), "a").get_trials()   # study.baselines=false: the grid's trial alone
    assert not orig.user_attrs.get("baseline")
    run_sweep([*grid, "study.name=b", *where, f"hydra.run.dir={tmp_path}/b"])
    (copy,) = load(str(tmp_path / "journal.log"), "b").get_trials()
    assert copy.state == TrialState.COMPLETE and copy.user_attrs["reused_from"] == {"study": "a", "trial": orig.number}
    assert copy.values == orig.values and copy.params == orig.params
    assert (tmp_path / "a" / "samples.parquet").exists()
    assert not (tmp_path / "b" / "samples.parquet").exists()          # nothing was decoded for it
    run_sweep([*grid, "study.name=c", "study.reuse=false", *where, f"hydra.run.dir={tmp_path}/c"])
    run_sweep([*grid, "study.name=d", "benchmark.limit=1", *where, f"hydra.run.dir={tmp_path}/d"])
    for name in ("c", "d"):
        (t,) = load(str(tmp_path / "journal.log"), name).get_trials()
        assert t.state == TrialState.COMPLETE and "reused_from" not in t.user_attrs
