"""The report command and the figure notebooks on a synthetic study."""
from __future__ import annotations

from pathlib import Path

import nbformat
import optuna
import pytest

from analysis.notebooks import available, render
from analysis.report import write_report

EXPECTED_FIGURES = ["pareto", "heatmap", "tradeoff", "tradeoff_r_inner", "tradeoff_epsilon", "tradeoff_beta",
                    "cache_sharing", "token_stability", "latent_change", "qualitative_examples"]


@pytest.mark.slow
def test_write_report_writes_every_expected_file(study_dir, tmp_path, capsys):
    out = tmp_path / "report"
    paths = write_report(study_dir, out)
    names = {p.name for p in paths}
    for stem in EXPECTED_FIGURES:
        assert {f"{stem}.png", f"{stem}.pdf"} <= names, stem
    assert {"table1.md", "table1.tex", "report.md", "trials.parquet", "samples.parquet"} <= names
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)
    # One progress line per figure.
    lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("[")]
    assert len(lines) == len(EXPECTED_FIGURES) and lines[0].startswith(f"[1/{len(EXPECTED_FIGURES)}] pareto")
    report = (out / "report.md").read_text()
    assert "![pareto](pareto.png)" in report and "Relative Diff to AR (r=32)" in report
    assert "## Pareto front — GSM8K" in report


def test_report_front_has_ties_and_speedups_have_intervals(study_dir, tmp_path):
    import re

    out = tmp_path / "report"
    write_report(study_dir, out, formats=("png",), figures={"pareto"}, progress=None)
    report = (out / "report.md").read_text()
    # 11 diffusion trials (conftest.build_trials). By the measured values 6 are non-dominated: (0.33, 420),
    # (0.35, 408), (0.36, 220), (0.38, 208), (0.42, 120), (0.44, 108). With ±5 points of accuracy, dominating needs
    # 10 points more accuracy *and* more tokens/s beyond ±3%: only 0.44 and 0.42 are 10 points above anything (0.32,
    # 0.33), and those run at 200–420 tokens/s against their 108–120. All 11 tie.
    assert "11 of 11 diffusion trials are not dominated beyond their 95% intervals" in report
    assert "6 are non-dominated by the measured values alone" in report
    assert re.search(r"Hypervolume w.r.t. \(0, 0\): [\d.]+ \[[\d.]+, [\d.]+\] with every point", report)
    speed = (out / "speedup.md").read_text()
    # static AR r=4 at 300 tokens/s: 300 / 37.5 = 8.00x, recorded with ±3%
    assert "| 8.00x [7.76, 8.24] |" in speed and "unpaired" not in speed


def test_report_of_a_study_recorded_before_paired_timing(unpaired_study_dir, tmp_path):
    out = tmp_path / "report"
    write_report(unpaired_study_dir, out, formats=("png",), figures={"pareto"}, progress=None)
    speed = (out / "speedup.md").read_text()
    rows = [r for r in speed.splitlines()[2:] if r.startswith("|")]
    assert len(rows) == 18 and all("| unpaired |" in r for r in rows)
    assert "8.00x" not in speed                       # 300 / 37.5 tokens/s, timed apart: never shown as a speed-up
    assert "unpaired" in (out / "table1.md").read_text()


def _tiny_study(path: Path) -> Path:
    """Three diffusion trials in a journal file: only the Pareto figure and Table 1 apply."""
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    study = optuna.create_study(study_name="tiny", storage=storage, directions=["maximize", "maximize"])
    dist = {"r_inner": optuna.distributions.CategoricalDistribution((1, 2, 4))}
    for r_inner, acc, tps in ((1, 0.3, 300.0), (2, 0.35, 150.0), (4, 0.4, 75.0)):
        study.add_trial(optuna.trial.create_trial(params={"r_inner": r_inner}, distributions=dist,
                                                  values=[acc, tps]))
    return path


def test_report_default_dir_is_outputs_study(tmp_path, monkeypatch):
    journal = _tiny_study(tmp_path / "journal.log")
    monkeypatch.chdir(tmp_path)
    paths = write_report(journal, formats=("png",), progress=None)
    assert sorted(p.as_posix() for p in paths) == sorted(f"outputs/tiny/{n}" for n in (
        "trials.parquet", "pareto.png", "tradeoff_r_inner.png", "table1.md", "table1.tex", "report.md"))


def test_cli(tmp_path, capsys):
    from analysis.__main__ import main
    journal = _tiny_study(tmp_path / "journal.log")
    assert main(["trials", str(journal), "-o", str(tmp_path / "trials.csv")]) == 0
    assert (tmp_path / "trials.csv").read_text().startswith("study,number,state,sampler,benchmark,model,r_inner")
    assert main(["report", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no such study file or directory") and len(err.splitlines()) == 1


@pytest.mark.parametrize("formats", ["", ","])
def test_cli_report_without_formats_is_one_line_error(tmp_path, capsys, formats):
    """No figure format is bad input: one line and exit 2 (analysis/README.md), nothing written; not an IndexError
    from report.md's figure links."""
    from analysis.__main__ import main
    journal = _tiny_study(tmp_path / "journal.log")
    assert main(["report", str(journal), "-o", str(tmp_path / "report"), "--formats", formats]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no figure formats given") and len(err.splitlines()) == 1
    assert not (tmp_path / "report").exists()


@pytest.mark.slow
def test_notebook_executes(study_dir, tmp_path):
    assert {"pareto", "token_stability"} <= set(available())
    path = render("token_stability", study_dir, tmp_path / "nb", extra={"max_traces": 1})
    nb = nbformat.read(path, as_version=4)
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert injected and str(study_dir) in injected[0].source
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert (tmp_path / "nb" / "token_stability_0.png").is_file()


def test_one_param_slice_holds_other_keys_fixed():
    import polars as pl

    from analysis.report import one_param_slice
    df = pl.DataFrame({"r_inner": [1, 2, 4, 1, 2, 4, 4], "beta": [0.0, 0.0, 0.0, 0.2, 0.2, 0.2, 0.5],
                       "epsilon": [0.03] * 6 + [0.1], "accuracy": [0.1] * 7})
    # Sweep of r_inner: epsilon held at 0.03 (covers 3 r′ values), beta kept as the grouping key.
    part = one_param_slice(df, "r_inner", keep=["beta"])
    assert part["epsilon"].unique().to_list() == [0.03] and len(part) == 6
    # Without keep, beta is held fixed too: first combination covering all three r′ values.
    assert one_param_slice(df, "r_inner")["beta"].unique().to_list() == [0.0]
