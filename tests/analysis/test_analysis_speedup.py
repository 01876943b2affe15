"""The speed-up table (every trial relative to static AR at r=32): hand-made trials, hand-computed numbers, and the
same numbers in Table 1's relative row and in the report. The speed-up is the paired one each trial recorded (timed
against the reference in its own rounds), never a ratio of tokens/s measured at different times."""
from __future__ import annotations

import re

import optuna
import polars as pl
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from analysis.reference import reference_label, reference_trials
from analysis.speedup import format_speedup, speedup_table
from analysis.tables import sampler_table
from analysis.trials import load_trials
from recdiff.errors import RecdiffError

from .conftest import set_metric_names

IDENTITY = {"benchmark": {"name": "arith", "limit": 4}, "model": {"path": "m"}, "run": {"max_new_tokens": 8}}


def _trial(sampler: str, params: dict, acc: float, tps: float, baseline: bool = False,
           state: TrialState = TrialState.COMPLETE, speedup: float | None = None,
           reference: str | None = None) -> optuna.trial.FrozenTrial:
    dists = {"sampler": CategoricalDistribution(["static", "adaptive", "speculative", "diffusion"]),
             "benchmark": CategoricalDistribution(["arith"])}
    for k, v in params.items():
        dists[k] = (CategoricalDistribution(["shared", "per_step"]) if k == "kv_cache" else
                    IntDistribution(1, 128) if isinstance(v, int) else FloatDistribution(0.0, 2.0))
    attrs = {"accuracy_lo": acc - 0.1, "accuracy_hi": acc + 0.1, "identity": IDENTITY,
             "config": {"sampler": {"name": sampler, **params}}}
    if reference is not None:   # run.reference; a config without it was timed against static r=32
        attrs["config"]["run"] = {"reference": reference}
    if speedup is not None:   # what recdiff.timing.PairedTiming.attrs() records
        attrs.update(tokens_per_s_lo=0.95 * tps, tokens_per_s_hi=1.05 * tps, speedup=speedup,
                     speedup_lo=speedup - 0.2, speedup_hi=speedup + 0.2, reference_tokens_per_s=tps / speedup,
                     timing_rounds=3, threads=1)
    if baseline:
        attrs["baseline"] = True
    return optuna.trial.create_trial(
        state=state, values=[acc, tps] if state == TrialState.COMPLETE else None,
        params={"sampler": sampler, "benchmark": "arith", **params}, distributions=dists, user_attrs=attrs)


@pytest.fixture
def study() -> optuna.Study:
    s = optuna.create_study(directions=["maximize", "maximize"], study_name="speedup")
    set_metric_names(s)
    # the paired speed-ups differ from tokens/s ÷ the reference's 25 tokens/s (timed at another moment): the table
    # must show the paired ones
    for t in [
        _trial("diffusion", {"r": 32, "r_inner": 4}, 0.50, 100.0, speedup=3.5),                        # 0
        _trial("static", {"r": 32, "init_scale": 0.0, "kv_cache": "shared"}, 0.40, 25.0, True, speedup=1.0),  # 1: ref
        _trial("static", {"r": 32, "init_scale": 0.0, "kv_cache": "per_step"}, 0.10, 5.0, speedup=0.25),  # 2
        _trial("static", {"r": 4, "init_scale": 0.0, "kv_cache": "shared"}, 0.05, 200.0, True, speedup=7.5),  # 3
        _trial("adaptive", {"r": 32, "epsilon": 0.03}, 0.45, 40.0, True, speedup=1.5),                 # 4
        _trial("diffusion", {"r": 32, "r_inner": 2}, 0.375, 150.0, speedup=5.5),                      # 5
        _trial("diffusion", {"r": 32, "r_inner": 8}, 0.0, 0.0, state=TrialState.FAIL),                # 6: left out
    ]:
        s.add_trial(t)
    return s


def test_speedup_and_delta_are_hand_computed(study):
    table = speedup_table(load_trials(study))
    got = {r["number"]: r for r in table.iter_rows(named=True)}
    assert set(got) == {0, 1, 2, 3, 4, 5}
    # reference: trial 1 (static r=32, shared KV), accuracy 0.40 [0.30, 0.50]; the speed-ups as recorded
    expected = {0: (3.5, 10.0), 1: (1.0, 0.0), 2: (0.25, -30.0), 3: (7.5, -35.0), 4: (1.5, 5.0), 5: (5.5, -2.5)}
    for n, (speedup, delta) in expected.items():
        assert got[n]["speedup"] == pytest.approx(speedup) and got[n]["delta_accuracy"] == pytest.approx(delta), n
        assert (got[n]["speedup_lo"], got[n]["speedup_hi"]) == pytest.approx((speedup - 0.2, speedup + 0.2)), n
        assert got[n]["paired"]
    # Δacc's interval: both accuracies ±0.1, their distances in quadrature (Newcombe): 10 ± 100·√(0.1² + 0.1²)
    assert (got[0]["delta_accuracy_lo"], got[0]["delta_accuracy_hi"]) == pytest.approx((10 - 14.142, 10 + 14.142),
                                                                                       abs=1e-3)
    assert (got[0]["tokens_per_s_lo"], got[0]["tokens_per_s_hi"]) == pytest.approx((95.0, 105.0))
    assert [r["number"] for r in table.iter_rows(named=True) if r["reference"]] == [1]
    assert got[1]["baseline"] and got[3]["baseline"] and not got[0]["baseline"]
    assert got[0]["accuracy_lo"] == pytest.approx(0.4) and got[0]["accuracy_hi"] == pytest.approx(0.6)
    # rows: the reference, the other baselines (static by r, adaptive), then the sweep's trials by number
    assert table["number"].to_list() == [1, 3, 2, 4, 0, 5]
    text = format_speedup(table)
    assert "3.50x [3.30, 3.70]" in text and "+10.0 [-4.1, +24.1]" in text and "= reference" in text
    assert "4.00x" not in text                                       # 100 / 25: never a ratio of unpaired timings
    md = format_speedup(table, markdown=True)
    assert md.splitlines()[0].startswith("| trial | sampler | accuracy [95% CI] | tokens/s [95% CI] |")
    assert "| 150.0 [142.5, 157.5] | 5.50x [5.30, 5.70] | -2.5 [-16.6, +11.6] |" in md


def test_a_study_recorded_before_paired_timing_has_unpaired_speedups():
    s = optuna.create_study(directions=["maximize", "maximize"], study_name="old")
    set_metric_names(s)
    s.add_trial(_trial("static", {"r": 32, "init_scale": 0.0, "kv_cache": "shared"}, 0.40, 25.0, True))
    s.add_trial(_trial("diffusion", {"r": 32, "r_inner": 4}, 0.50, 100.0))
    df = load_trials(s)
    assert df["speedup"].null_count() == 2 and df.schema["speedup"] == pl.Float64
    table = speedup_table(df)
    assert not table["paired"].any() and table["speedup"].null_count() == 2
    assert table["delta_accuracy"].to_list() == pytest.approx([0.0, 10.0])   # accuracy is still comparable
    rows = format_speedup(table).splitlines()[1:]
    assert all(re.split(r"\s{2,}", r.strip())[-2] == "unpaired" for r in rows)


def test_reference_choice_and_repeats_average(study):
    df = load_trials(study)
    assert reference_trials(df)["number"].to_list() == [1]
    # the reference is the sampler the trials were timed against (run.reference: static r=32 at its defaults unless
    # the study names another), as each trial's config records it: a per-step KV r=32 trial is not it
    only_per_step = df.filter(pl.col("number") != 1)
    assert reference_trials(only_per_step).is_empty()
    # trials without a recorded config: static AR at r=32 picked by its settings (the most common left)
    unknown = only_per_step.with_columns(pl.lit(None, pl.Boolean).alias("is_reference"))
    assert reference_trials(unknown)["number"].to_list() == [2]
    # repeats of the reference are averaged: (0.40 + 0.30) / 2 = 0.35 at (25 + 75) / 2 = 50 tokens/s
    study.add_trial(_trial("static", {"r": 32, "init_scale": 0.0, "kv_cache": "shared"}, 0.30, 75.0, True,
                           speedup=1.0))
    table = speedup_table(load_trials(study))
    row = table.filter(pl.col("number") == 0).row(0, named=True)
    assert row["speedup"] == pytest.approx(3.5) and row["delta_accuracy"] == pytest.approx(15.0)
    # the mean of two references' accuracies, each ±0.1: ±0.1/√2 for the mean, then in quadrature with trial 0's
    half = 100 * (0.1**2 + (0.1 / 2**0.5) ** 2) ** 0.5
    assert (row["delta_accuracy_lo"], row["delta_accuracy_hi"]) == pytest.approx((15 - half, 15 + half))


def test_no_reference_leaves_the_accuracy_change_empty(study):
    """Without static AR in the table, the accuracy change has nothing to compare with; the paired speed-ups were
    measured inside each trial and stay."""
    df = load_trials(study).filter(pl.col("sampler") != "static")
    table = speedup_table(df)
    assert table["delta_accuracy"].null_count() == table.height and "—" in format_speedup(table)
    assert table["speedup"].to_list() == pytest.approx([1.5, 3.5, 5.5])
    with pytest.raises(RecdiffError):
        speedup_table(df.clear())


def test_table1_relative_row_has_the_same_numbers(study):
    df = load_trials(study)
    table = sampler_table(df, relative="each")
    speed = {r["number"]: r for r in speedup_table(df).iter_rows(named=True)}
    assert table.rows[0].reference and table.rows[0].settings.get("kv_cache") == "shared"
    by_label = {row.label: rel["arith"] for row, rel in table.relative}
    for label, n in (("Diff. Sampler (r′=4)", 0), ("Diff. Sampler (r′=2)", 5)):
        rel = by_label[label]
        assert (rel.delta.value, rel.delta.lo, rel.delta.hi) == pytest.approx(
            (speed[n]["delta_accuracy"], speed[n]["delta_accuracy_lo"], speed[n]["delta_accuracy_hi"]))
        assert (rel.speedup.value, rel.speedup.lo, rel.speedup.hi) == pytest.approx(
            (speed[n]["speedup"], speed[n]["speedup_lo"], speed[n]["speedup_hi"]))


def test_report_shows_the_speedup_table(study, tmp_path):
    from analysis.report import write_report

    write_report(load_trials(study), tmp_path, formats=("png",), progress=None)
    md = (tmp_path / "speedup.md").read_text()
    assert "| 3.50x [3.30, 3.70] | +10.0 [-4.1, +24.1] |" in md
    report = (tmp_path / "report.md").read_text()
    assert "## Relative to Static AR (r=32)" in report and md.strip() in report
    assert pl.read_csv(tmp_path / "speedup.csv")["speedup"].to_list()[0] == pytest.approx(1.0)


def test_a_study_timed_against_another_reference_names_it():
    """`run.reference='diffusion r_inner=8'`: the speed-ups are against that sampler, its own trial is the reference
    (Δacc against it), and every header names it."""
    s = optuna.create_study(directions=["maximize", "maximize"], study_name="other")
    set_metric_names(s)
    ref = "diffusion r_inner=8"
    s.add_trial(_trial("static", {"r": 32, "init_scale": 0.0, "kv_cache": "shared"}, 0.40, 25.0, True, speedup=0.5,
                       reference=ref))
    s.add_trial(_trial("diffusion", {"r": 32, "r_inner": 8}, 0.45, 50.0, speedup=1.0, reference=ref))
    s.add_trial(_trial("diffusion", {"r": 32, "r_inner": 4}, 0.50, 100.0, speedup=2.0, reference=ref))
    df = load_trials(s)
    assert reference_trials(df)["number"].to_list() == [1]
    assert reference_label(df) == "Diff. Sampler (r′=8)"
    table = speedup_table(df)
    assert table.filter(pl.col("reference"))["number"].to_list() == [1]
    assert table.filter(pl.col("number") == 2)["delta_accuracy"].to_list() == pytest.approx([5.0])
    assert "speed-up vs Diff. Sampler (r′=8) [95% CI]" in format_speedup(table, reference=reference_label(df))
    t1 = sampler_table(df, relative="each")
    assert [r.reference for r in t1.rows] == [True, False, False]
    assert "Relative Diff to Diff. Sampler (r′=8)" in t1.to_markdown()
