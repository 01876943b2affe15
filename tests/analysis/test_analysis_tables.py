"""Table 1 (tab:sampler_comparison) layout, values and relative row."""
from __future__ import annotations

import polars as pl
import pytest

from analysis.tables import sampler_table
from recdiff.errors import RecdiffError

# Paper values (GSM8K and MBPP columns of Table 1) as a trials table.
PAPER = [
    ("static", {"r": 32}, "gsm8k", 0.4177, 36.1), ("static", {"r": 32}, "mbpp", 0.3160, 15.3),
    ("static", {"r": 4}, "gsm8k", 0.0159, 312.9), ("static", {"r": 4}, "mbpp", 0.0140, 49.6),
    ("adaptive", {"r": 32}, "gsm8k", 0.4223, 66.9), ("adaptive", {"r": 32}, "mbpp", 0.3020, 29.5),
    ("speculative", {"r": 32}, "gsm8k", 0.4276, 69.5), ("speculative", {"r": 32}, "mbpp", 0.3060, 31.6),
    ("diffusion", {"r_inner": 2, "beta": 0.5}, "gsm8k", 0.4071, 182.2),
    ("diffusion", {"r_inner": 2, "beta": 0.5}, "mbpp", 0.2780, 92.3),
    ("diffusion", {"r_inner": 4, "beta": 0.0}, "gsm8k", 0.4208, 157.3),
    ("diffusion", {"r_inner": 4, "beta": 0.0}, "mbpp", 0.3100, 70.2),
]


# The paired speed-ups (each trial timed against static AR r=32 in its own rounds) of the two diffusion settings,
# with their intervals: (r′, benchmark) → (speed-up, low, high).
PAIRED = {(2, "gsm8k"): (5.05, 4.90, 5.20), (2, "mbpp"): (6.03, 5.80, 6.30), (4, "gsm8k"): (4.36, 4.20, 4.50),
          (4, "mbpp"): (4.59, 4.40, 4.80)}


@pytest.fixture
def paper_df() -> pl.DataFrame:
    rows = [{"number": i, "state": "COMPLETE", "sampler": s, "benchmark": b, "r": None, "r_inner": None,
             "beta": None, **p, "accuracy": a, "tokens_per_s": t} for i, (s, p, b, a, t) in enumerate(PAPER)]
    rows = [{**r, "r": r["r"] if r["r"] is not None else 32} for r in rows]
    for r in rows:
        r["speedup"], r["speedup_lo"], r["speedup_hi"] = PAIRED.get((r["r_inner"], r["benchmark"]), (None,) * 3)
    return pl.DataFrame(rows, schema_overrides={"beta": pl.Float64, "r_inner": pl.Int64, "speedup": pl.Float64,
                                                "speedup_lo": pl.Float64, "speedup_hi": pl.Float64})


def test_rows_and_relative_row(paper_df):
    t = sampler_table(paper_df)
    assert t.benchmarks == ["gsm8k", "mbpp"]
    assert [r.label for r in t.rows] == [
        "Static AR (r=32)", "Static AR (r=4)", "Adaptive Compute AR", "Speculative Decoding AR",
        "Diff. Sampler (r′=2, β_t=0.5)", "Diff. Sampler (r′=4, β_t=0)"]
    # Relative row: best-accuracy diffusion row (r′=4, β=0) vs static r=32, as in the paper.
    (row, rel), = t.relative
    assert row.label == "Diff. Sampler (r′=4, β_t=0)"
    # accuracy change in points (no accuracy intervals in this table: none for the change), the paired speed-up
    assert rel["gsm8k"].delta.value == pytest.approx(0.31) and not rel["gsm8k"].delta.known
    assert (rel["gsm8k"].speedup.value, rel["gsm8k"].speedup.lo,
            rel["gsm8k"].speedup.hi) == pytest.approx(PAIRED[4, "gsm8k"])
    assert rel["mbpp"].delta.value == pytest.approx(-0.60) and rel["mbpp"].speedup.value == pytest.approx(4.59)


def test_markdown(paper_df):
    md = sampler_table(paper_df).to_markdown()
    lines = md.strip().splitlines()
    assert lines[0] == "| Sampler | GSM8K Acc | GSM8K t/s | MBPP Acc | MBPP t/s |"
    assert lines[2] == "| Static AR (r=32) | 41.77% | 36.1 | 31.60% | 15.3 |"
    assert lines[-1] == ("| **Relative Diff to AR (r=32)** | +0.31 | **4.36x** [4.20, 4.50] | -0.60 | "
                         "**4.59x** [4.40, 4.80] |")
    # trials recorded before paired timing: the speed-up is unknown, not 157.3 / 36.1
    md = sampler_table(paper_df.drop("speedup", "speedup_lo", "speedup_hi")).to_markdown()
    assert md.strip().splitlines()[-1] == "| **Relative Diff to AR (r=32)** | +0.31 | unpaired | -0.60 | unpaired |"


def test_latex(paper_df):
    tex = sampler_table(paper_df).to_latex()
    assert r"\toprule" in tex and r"\bottomrule" in tex and r"\cmidrule(lr){2-3} \cmidrule(lr){4-5}" in tex
    assert r"\multicolumn{2}{c}{GSM8K} & \multicolumn{2}{c}{MBPP}" in tex
    assert r"Static AR ({\tiny$r=32$}) & 41.77\% & 36.1 & 31.60\% & 15.3 \\" in tex
    assert r"Diff. Sampler ({\tiny$r'=2,\beta_t=0.5$}) & 40.71\% & 182.2 & 27.80\% & 92.3 \\" in tex
    assert (r"Relative Diff to AR ({\tiny$r=32$}) & +0.31 & \textbf{4.36x} {\scriptsize [4.20, 4.50]} & -0.60 & "
            r"\textbf{4.59x} {\scriptsize [4.40, 4.80]} \\") in tex
    # Sections separated as in the paper: reference | other static | baselines | diffusion | relative.
    assert tex.count(r"\midrule") == 5


def test_each_relative_and_repeats(paper_df):
    repeat = paper_df.filter(pl.col("sampler") == "static").with_columns(pl.col("tokens_per_s") * 3)
    t = sampler_table(pl.concat([paper_df, repeat]), relative="each")
    ref = t.rows[0]
    assert ref.cells["gsm8k"] == pytest.approx((0.4177, 72.2))  # repeats averaged
    assert len(t.relative) == 2
    assert "Relative Diff to AR (r=32): Diff. Sampler (r′=2, β_t=0.5)" in t.to_markdown()
    frame = t.to_frame()
    assert frame.filter(pl.col("row") == "Static AR (r=4)").sort("benchmark")["accuracy"].to_list() == [0.0159, 0.0140]


def test_no_reference_no_relative(paper_df):
    t = sampler_table(paper_df.filter(pl.col("sampler") != "static"))
    assert t.relative == [] and "Relative" not in t.to_markdown()
    with pytest.raises(RecdiffError):
        sampler_table(paper_df.clear())


def test_trials_measured_under_different_slices_are_never_averaged(tmp_path):
    """Two runs of one setting on different benchmark.limit in one study (what older sweeps allowed): Table 1 and the
    report refuse, naming the key, instead of averaging them."""
    import optuna

    from analysis import load_trials
    from analysis.report import write_report

    study = optuna.create_study(study_name="mixed", directions=["maximize", "maximize"])
    for n, (limit, acc) in enumerate([(2, 1.0), (32, 0.25), (32, 0.5)]):
        config = {"sampler": {"name": "static", "r": 32}, "benchmark": {"name": "arith", "limit": limit},
                  "model": {"path": "recdiff/assets/embedded"}, "run": {"max_new_tokens": 8}}
        study.add_trial(optuna.trial.create_trial(values=[acc, 10.0], params={"r": 32},
                                                  distributions={"r": optuna.distributions.IntDistribution(1, 64)},
                                                  user_attrs={"config": config}))
    df = load_trials(study)
    assert df["identity"].n_unique() == 2
    with pytest.raises(RecdiffError, match=r"benchmark arith holds trials measured under different settings "
                                           r"\(benchmark.limit=2 in trial 0, 32 in trial 1\)"):
        sampler_table(df)
    with pytest.raises(RecdiffError, match=r"benchmark.limit=2 in trial 0, 32 in trial 1"):
        write_report(df, tmp_path / "report", progress=None)
    assert not (tmp_path / "report").exists()
    # one identity: the repeated trials of a setting are averaged as before
    same = df.filter(pl.col("number") > 0)
    assert sampler_table(same).rows[0].cells["arith"] == (0.375, 10.0)


def _older_study(devices: list[tuple[str, str | None]]):
    """A study recorded before the identity held the device: each trial's ``device`` attribute (or none) and its
    benchmark, the rest alike."""
    import optuna

    study = optuna.create_study(study_name="devices", directions=["maximize", "maximize"])
    for n, (bench, device) in enumerate(devices):
        config = {"sampler": {"name": "static", "r": 32}, "benchmark": {"name": bench, "limit": 8},
                  "model": {"path": "recdiff/assets/embedded"}, "run": {"max_new_tokens": 8}}
        attrs = {"config": config, **({"device": device} if device else {})}
        study.add_trial(optuna.trial.create_trial(values=[0.5 + n / 10, 10.0 * (n + 1)], params={"r": 32},
                                                  distributions={"r": optuna.distributions.IntDistribution(1, 64)},
                                                  user_attrs=attrs))
    return study


def test_trials_timed_on_different_devices_never_share_a_front_in_older_studies_too(tmp_path):
    from analysis import load_trials
    from analysis.report import write_report

    a100, h100 = "cuda (NVIDIA A100-SXM4-80GB)", "cuda (NVIDIA H100 80GB HBM3)"
    df = load_trials(_older_study([("arith", a100), ("arith", h100)]))
    with pytest.raises(RecdiffError) as err:
        write_report(df, tmp_path / "report", progress=None)
    assert str(err.value) == ("study devices: benchmark arith holds trials measured under different settings "
                              "(device.name='NVIDIA A100-SXM4-80GB' in trial 0, 'NVIDIA H100 80GB HBM3' in trial 1); "
                              "they are never averaged or put on one Pareto front: analyse them as separate studies")
    assert not (tmp_path / "report").exists()
    # the device is study-wide: a second benchmark timed on a CPU is refused too
    cpu = load_trials(_older_study([("arith", a100), ("gsm8k", "cpu (x86_64, 4 threads)")]))
    with pytest.raises(RecdiffError, match=r"benchmarks arith and gsm8k hold trials measured under different settings "
                                           r"\(device.kind='cuda' in trial 0, 'cpu' in trial 1\)"):
        sampler_table(cpu)
    # where a trial does not say (or names a CPU by its architecture only), nothing is refused
    fine = load_trials(_older_study([("arith", "cpu (x86_64, 4 threads)"), ("arith", "cpu (x86_64, 2 threads)"),
                                     ("arith", None)]))
    assert sampler_table(fine).rows
