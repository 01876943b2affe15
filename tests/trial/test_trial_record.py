"""The declaration of a trial's record (recdiff/trial/record.py): what measure writes, what the analysis and the tune
read back of any version, and the docs' table generated from it."""

from __future__ import annotations

import dataclasses

import optuna
import polars as pl
import pytest

from analysis.trials import load_trials
from recdiff.tools import record_docs
from recdiff.trial.record import RENAMED, TrialRecord, columns, markdown_table, read_attrs


def test_the_docs_table_is_the_declarations():
    assert record_docs.main(["--check"]) == 0, "run python -m recdiff.tools.record_docs"
    text = record_docs.TRIAL_RECORD_MD.read_text()
    for f in dataclasses.fields(TrialRecord):
        assert f"| `{f.name}` |" in text, f.name
    # a field the doc lacks is caught: the check compares against the table of today's declaration
    assert record_docs.with_table(text.replace("| `n_correct` |", "| `n_right` |")) == text


def test_every_field_has_a_unit_and_a_meaning():
    for f in dataclasses.fields(TrialRecord):
        assert f.default is None and isinstance(f.metadata["unit"], str) and f.metadata["meaning"], f.name
    assert markdown_table().count("\n") == len(dataclasses.fields(TrialRecord)) + 2


def test_intervals_are_named_one_way():
    names = [f.name for f in dataclasses.fields(TrialRecord)]
    bounds = [n for n in names if n.endswith(("_lo", "_hi", "_low", "_high"))]
    assert bounds == ["accuracy_lo", "accuracy_hi", "tokens_per_s_lo", "tokens_per_s_hi", "speedup_lo", "speedup_hi"]
    assert set(RENAMED.values()) <= set(names)


def test_older_names_are_read_as_todays():
    old = {"accuracy_low": 0.25, "accuracy_high": 0.75, "n_samples": 4, "config": {"x": 1}}
    assert read_attrs(old) == {"accuracy_lo": 0.25, "accuracy_hi": 0.75, "n_samples": 4, "config": {"x": 1}}
    # both present (a trial copied, then written again): today's name wins
    assert read_attrs({"accuracy_low": 0.1, "accuracy_lo": 0.2})["accuracy_lo"] == 0.2
    rec = TrialRecord.of(old)
    assert (rec.accuracy_lo, rec.accuracy_hi, rec.n_samples, rec.speedup) == (0.25, 0.75, 4, None)


def test_a_trial_stores_its_own_samplers_fields():
    rec = TrialRecord(accuracy_lo=0.5, accuracy_hi=0.9, q1_acceptance=0.8, peak_lanes=3)
    static = rec.attrs("static")
    assert static["accuracy_lo"] == 0.5 and not {"q1_acceptance", "q2_acceptance", "peak_lanes"} & set(static)
    looped = rec.attrs("loopspec")
    assert (looped["q1_acceptance"], looped["q2_acceptance"], looped["peak_lanes"]) == (0.8, None, 3)
    assert len(looped) == len(dataclasses.fields(TrialRecord))
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.accuracy_lo = 0.0   # type: ignore[misc]


def test_the_analysis_reads_old_and_new_names_into_the_declared_columns(tmp_path):
    study = optuna.create_study(directions=["maximize", "maximize"], study_name="s",
                                storage=f"sqlite:///{tmp_path / 's.db'}")
    for attrs in ({"accuracy_low": 0.1, "accuracy_high": 0.6},                      # written before the record
                  TrialRecord(accuracy_lo=0.2, accuracy_hi=0.7, n_correct=3).attrs("static")):
        study.add_trial(optuna.trial.create_trial(values=[0.4, 10.0], user_attrs=attrs))
    df = load_trials(tmp_path / "s.db")
    assert df["accuracy_lo"].to_list() == [0.1, 0.2] and df["accuracy_hi"].to_list() == [0.6, 0.7]
    assert "accuracy_low" not in df.columns
    # every record column, typed as declared, also where no trial has a value
    assert set(columns()) <= set(df.columns) and "speedup_cells" not in df.columns
    assert (df.schema["n_correct"], df.schema["timing_rounds"], df.schema["compiled"]) == \
        (pl.Int64, pl.Int64, pl.Boolean)
    assert df["n_correct"].to_list() == [None, 3]
