"""Loading studies, sweep dirs and result.json files into tidy tables."""
from __future__ import annotations

import json
import shutil

import numpy as np
import optuna
import polars as pl
import pytest

from analysis import load_samples, load_trace, load_trials
from analysis.labels import SAMPLER_KEYS
from recdiff.errors import RecdiffError


def test_study_dir_to_tidy_table(study_dir):
    df = load_trials(study_dir)
    assert len(df) == 19 and df["number"].to_list() == list(range(19))
    for col in ("study", "state", "sampler", "benchmark", "model", *SAMPLER_KEYS, "accuracy", "tokens_per_s",
                "accuracy_lo", "accuracy_hi", "n_samples", "samples_path", "trace_paths", "kv_cache_bytes"):
        assert col in df.columns, col
    assert df["study"].unique().to_list() == ["synthetic"]
    assert df["state"].value_counts().sort("state").rows() == [("COMPLETE", 18), ("FAIL", 1)]
    # Baselines get every sampler key: from the config where set, null where not applicable.
    static = df.filter((pl.col("sampler") == "static") & (pl.col("r") == 8)).row(0, named=True)
    assert static["r_inner"] is None and static["kv_cache"] == "shared" and static["benchmark"] == "gsm8k"
    # Diffusion trials: params (r_inner, beta) and config-only keys (eta) both present, typed.
    diff = df.filter((pl.col("sampler") == "diffusion") & (pl.col("r_inner") == 2) & (pl.col("beta") == 0.2))
    assert diff["eta"].to_list() == [0.1] and diff["continuous_compute"].to_list() == [False]
    assert df.schema["r_inner"] == pl.Int64 and df.schema["beta"] == pl.Float64
    assert df.schema["continuous_compute"] == pl.Boolean
    fail = df.filter(pl.col("state") == "FAIL")
    assert fail["accuracy"].to_list() == [None]


def test_paired_timing_attributes_are_columns(study_dir, unpaired_study_dir):
    """recdiff.timing.PairedTiming.attrs() becomes typed columns; a study recorded before paired timing loads with
    them null (its speed-up is unknown, never computed from tokens/s measured at different times)."""
    df = load_trials(study_dir)
    timing = {"tokens_per_s_lo": pl.Float64, "tokens_per_s_hi": pl.Float64, "speedup": pl.Float64,
              "speedup_lo": pl.Float64, "speedup_hi": pl.Float64, "reference_tokens_per_s": pl.Float64,
              "timing_rounds": pl.Int64, "threads": pl.Int64}
    assert {c: df.schema[c] for c in timing} == timing
    ref = df.filter((pl.col("sampler") == "static") & (pl.col("r") == 32) & (pl.col("kv_cache") == "shared"))
    assert ref["speedup"].to_list() == [1.0] and ref["timing_rounds"].to_list() == [3]
    r4 = df.filter((pl.col("r_inner") == 4) & (pl.col("beta") == 0.0) & pl.col("epsilon").eq(0.03)).row(0, named=True)
    assert r4["speedup"] == pytest.approx(100.0 / 37.5) and r4["tokens_per_s_lo"] == pytest.approx(0.97 * 100.0)
    old = load_trials(unpaired_study_dir)
    assert len(old) == len(df) and {c: old.schema[c] for c in timing} == timing
    assert all(old[c].null_count() == len(old) for c in timing)
    assert old.select("accuracy", "tokens_per_s").equals(df.select("accuracy", "tokens_per_s"))


def test_sources_agree(study_dir, tmp_path):
    by_dir = load_trials(study_dir)
    by_journal = load_trials(study_dir / "journal.log")
    assert by_dir.drop("study").equals(by_journal.drop("study"))
    # SQLite copy of the same study via a storage URL.
    url = f"sqlite:///{tmp_path / 'copy.db'}"
    optuna.copy_study(from_study_name="synthetic", from_storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(study_dir / "journal.log"))), to_storage=url)
    by_url = load_trials(url)
    cols = ["number", "state", "r_inner", "beta", "accuracy", "tokens_per_s", "samples_path"]
    assert by_url.select(cols).equals(by_dir.select(cols))
    assert load_trials(tmp_path / "copy.db").select(cols).equals(by_dir.select(cols))


def test_result_json_dir(tmp_path):
    for i, (acc, r_inner) in enumerate([(0.5, 4), (0.4, 2)]):
        d = tmp_path / "run" / f"t{i}"
        d.mkdir(parents=True)
        (d / "result.json").write_text(json.dumps({
            "params": {"r_inner": r_inner}, "values": {"accuracy": acc, "tokens_per_s": 10.0 * (i + 1)},
            "user_attrs": {"config": {"sampler": {"name": "diffusion", "beta": 0.2}, "benchmark": {"name": "gsm8k"}},
                           "samples_path": "samples.parquet"},
            "state": "COMPLETE"}))
        pl.DataFrame({"problem_id": ["a", "b"], "correct": [True, False]}).write_parquet(d / "samples.parquet")
    df = load_trials(tmp_path / "run")
    assert df.select("r_inner", "beta", "accuracy", "sampler").rows() == [(4, 0.2, 0.5, "diffusion"),
                                                                          (2, 0.2, 0.4, "diffusion")]
    # Relative samples_path resolved against the trial's directory.
    samples = load_samples(df)
    assert len(samples) == 4 and set(samples["r_inner"].to_list()) == {2, 4}


def test_samples_long_table(study_dir):
    df = load_trials(study_dir)
    samples = load_samples(df)
    assert len(samples) == 4 * len(df)
    assert {"number", "sampler", "r_inner", "problem_id", "correct", "tokens_per_s"} <= set(samples.columns)
    assert samples.group_by("number").len()["len"].to_list() == [4] * len(df)


def test_trace_roundtrip(tmp_path, trace):
    np.savez(tmp_path / "t.npz", **trace)
    t = load_trace(tmp_path / "t.npz")
    assert t["prompt_len"] == 3 and t["tokens"].shape == (6, 8)
    np.testing.assert_array_equal(t["frozen"], trace["frozen"])
    assert load_trace(trace)["tokens"].tolist() == trace["tokens"].tolist()


@pytest.mark.parametrize("make_source,match", [
    (lambda p: p / "missing.log", "no such"),
    (lambda p: "ftp://host/db", "unknown storage"),
    (lambda p: f"sqlite:///{p / 'none.db'}", "no SQLite database"),
    (lambda p: p, "no study in"),
])
def test_errors_are_one_line(tmp_path, make_source, match):
    with pytest.raises(RecdiffError, match=match) as exc:
        load_trials(make_source(tmp_path))
    assert "\n" not in str(exc.value)


def test_missing_and_empty_study(tmp_path):
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "j.log")))
    optuna.create_study(study_name="empty", storage=storage, directions=["maximize", "maximize"])
    with pytest.raises(RecdiffError, match="no trials"):
        load_trials(tmp_path / "j.log")
    with pytest.raises(RecdiffError, match="no study 'other'"):
        load_trials(tmp_path / "j.log", study_name="other")
    optuna.create_study(study_name="second", storage=storage)
    with pytest.raises(RecdiffError, match="2 studies"):
        load_trials(tmp_path / "j.log")


def test_study_json_file_and_bare_study_name(study_dir, tmp_path, monkeypatch):
    assert len(load_trials(study_dir / "study.json")) == 19
    # A bare word is a study name in the default storage outputs/optuna/journal.log.
    (tmp_path / "outputs" / "optuna").mkdir(parents=True)
    shutil.copy(study_dir / "journal.log", tmp_path / "outputs" / "optuna" / "journal.log")
    monkeypatch.chdir(tmp_path)
    assert load_trials("synthetic")["number"].to_list() == list(range(19))
    with pytest.raises(RecdiffError, match="no study 'other'"):
        load_trials("other")


def test_unnamed_objectives_follow_optuna_naming():
    study = optuna.create_study(directions=["minimize"] * 3)
    study.add_trial(optuna.trial.create_trial(values=[1.0, 2.0, 3.0]))
    df = load_trials(study)
    assert df.select("values_0", "values_1", "values_2").row(0) == (1.0, 2.0, 3.0)
