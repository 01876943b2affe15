"""The analysis of a paper run (``python -m analysis paper``, whose runner is :mod:`recdiff.tools.paper`): every
figure and table of each recipe's study, the verdict of each of the paper's claims (:mod:`analysis.claims`), and a
``report.md`` that states them.

Output (default ``outputs/paper/``)::

    report.md                 claims, verdicts, the figures, Table 1 and the speed-up table
    verdicts.csv              one row per claim: figure, recipe, status, evidence
    figures/<recipe>/         `analysis report` of the recipe's study (figures, table1.md/.tex, speedup.md, ...)
    runs/<recipe>/            the sweep's Hydra output (per-trial samples, traces)
    logs/<recipe>.log         the sweep's console output
    optuna/journal.log        the studies (browse with `optuna-dashboard <out>/optuna/journal.log`)
    paper.json                what ran: scale, command lines, studies, timings
"""
from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from analysis.claims import CLAIMS, Claim, judge_all
from analysis.reference import PAPER_REFERENCE, reference_label
from analysis.verdicts import Verdict, count_outcomes
from recdiff.errors import RecdiffError

# figures a recipe's report draws besides its Pareto plot and its claims' figures
EXTRA_FIGURES = {"loopspec": ("loopspec_readouts",)}


def storage_path(out: Path) -> str:
    """The paper run's Optuna journal under its output folder."""
    return str(out / "optuna" / "journal.log")


def load_studies(out: Path, runs: list[dict], say: Callable[[str], None] = print) -> dict[str, pl.DataFrame]:
    """The trials table of each recipe's study, by recipe (a recipe that recorded nothing is left out)."""
    from analysis.trials import load_trials

    trials: dict[str, pl.DataFrame] = {}
    for run in runs:
        try:
            trials[run["recipe"]] = load_trials(storage_path(out), run["study"])
        except RecdiffError as exc:
            say(f"  {run['recipe']}: no study ({exc})")
    return trials


def load_paper(out: str | Path) -> tuple[dict, dict[str, pl.DataFrame]]:
    """(paper.json, trials by recipe) of a finished `python -m analysis paper` folder."""
    out = Path(out)
    if not (out / "paper.json").is_file():
        raise RecdiffError(f"{out} holds no paper.json: run `python -m analysis paper --out {out}` first")
    manifest = json.loads((out / "paper.json").read_text())
    return manifest, load_studies(out, manifest["runs"], say=lambda _: None)


def write_figures(trials: dict[str, pl.DataFrame], out: Path, say: Callable[[str], None]) -> None:
    """`analysis report` of every recipe study into figures/<recipe>/: the figures its claims need, its pareto plot,
    Table 1, the speed-up table and the tidy trials."""
    from analysis.report import write_report

    for recipe, df in trials.items():
        wanted = {"pareto", *EXTRA_FIGURES.get(recipe, ()), *(c.figure for c in CLAIMS if c.recipe == recipe)}
        try:
            write_report(df, out / "figures" / recipe, formats=("png", "pdf"), figures=wanted, progress=None)
        except (RecdiffError, RuntimeError) as exc:
            say(f"  {recipe}: report incomplete ({exc})")
        say(f"  figures/{recipe}/: {', '.join(sorted(p.name for p in (out / 'figures' / recipe).glob('*.png')))}")


def _interval(trials: dict[str, pl.DataFrame]) -> tuple[int | None, float | None]:
    frames = [df.filter(pl.col("state") == "COMPLETE") for df in trials.values() if "accuracy_hi" in df.columns]
    frames = [f for f in frames if not f.is_empty()]
    if not frames:
        return None, None
    df = pl.concat([f.select("n_samples", "accuracy_lo", "accuracy_hi") for f in frames], how="vertical_relaxed")
    n = int(df["n_samples"].median()) if df["n_samples"].null_count() < df.height else None
    return n, float((100 * (df["accuracy_hi"] - df["accuracy_lo"]) / 2).median())


def _speed_width(trials: dict[str, pl.DataFrame]) -> str:
    """How wide the speed intervals were: the median half-width of tokens/s and of the paired speed-up, in % of the
    value, and the rounds they were timed over; or why there are none."""
    cols = ("tokens_per_s", "tokens_per_s_lo", "tokens_per_s_hi", "speedup", "speedup_lo", "speedup_hi",
            "timing_rounds")
    frames = [df.filter(pl.col("state") == "COMPLETE").select(cols) for df in trials.values()
              if set(cols) <= set(df.columns)]
    df = pl.concat(frames, how="vertical_relaxed").drop_nulls() if frames else pl.DataFrame()
    if df.is_empty():
        return ("The trials carry no paired timing (no tokens/s interval, no speed-up timed against static AR in the "
                "same rounds): every check of a speed is inconclusive.")
    tps = float((50 * (df["tokens_per_s_hi"] - df["tokens_per_s_lo"]) / df["tokens_per_s"]).median())
    sp = float((50 * (df["speedup_hi"] - df["speedup_lo"]) / df["speedup"]).median())
    refs = [d.select("speed_reference") for d in trials.values() if "speed_reference" in d.columns]
    reference = _reference_of(pl.concat(refs, how="vertical_relaxed") if refs else None)
    return (f"Speed is timed in {int(df['timing_rounds'].median())} rounds alternating each trial's sampler with "
            f"{reference} on the same problems: the 95% intervals are about ±{tps:.1f}% for tokens/s and "
            f"±{sp:.1f}% for the paired speed-up (median over the trials; widest ±{_widest(df):.1f}%).")


def _widest(df: pl.DataFrame) -> float:
    """The widest paired speed-up interval's half-width among the trials, in % of the speed-up."""
    return float((50 * (df["speedup_hi"] - df["speedup_lo"]) / df["speedup"]).max())


def _reference_of(df: pl.DataFrame | None) -> str:
    return reference_label(df) if df is not None else PAPER_REFERENCE


def _figure_link(out: Path, claim: Claim) -> str | None:
    png = out / "figures" / claim.recipe / f"{claim.figure}.png"
    return f"figures/{claim.recipe}/{claim.figure}.png" if png.is_file() else None


def write_report_md(out: Path, scale_name: str, settings: dict[str, Any], embedded: Sequence[str], runs: list[dict],
                    verdicts: list[tuple[Claim, Verdict]], trials: dict[str, pl.DataFrame], seconds: float,
                    overrides: Sequence[str] = ()) -> Path:
    """``report.md`` of a run at scale ``scale_name`` (its ``settings``: ``limit``, ``speed_samples``, ``repeats``),
    whose sweeps ran with the overrides ``embedded``."""
    n, half = _interval(trials)
    md = [f"# The paper's figures on the embedded default (`--scale {scale_name}`)", "",
          f"`python -m analysis paper --scale {scale_name}"
          f"{''.join(f' --override {o}' for o in overrides)}`: every recipe in `sweeps/` run with "
          f"`{' '.join(embedded)}` at benchmark.limit={settings['limit']} "
          f"(tokens/s: median over {settings['speed_samples']} problems × {settings['repeats']} "
          "rounds at batch 1), "
          f"in {seconds / 60:.1f} min on {platform.node() or 'this machine'} ({os.cpu_count()} CPUs).", ""]
    if n is not None:
        md += [f"Accuracy is measured on {n} problems per trial: its 95% intervals are about ±{half:.1f} points, so "
               "accuracy differences smaller than that are within sampling noise.", ""]
    md += [_speed_width(trials), ""]
    counts = count_outcomes([v for _, v in verdicts])
    md += ["Each verdict is computed from the studies by `analysis/judges.py` (thresholds next to each check, with "
           "the 95% interval of each number): a check passes (✓) or fails (✗) only when its interval lies on one "
           "side of the threshold, else it is inconclusive (?); **agrees** when every check passes, **disagrees** "
           "when one fails, **inconclusive** otherwise, **n/a** when the data cannot test the claim.", "",
           "Verdicts: " + ", ".join(f"{k} {v}" for k, v in counts.items()) + ".", "",
           "| figure | paper | claim | verdict | evidence |", "|---|---|---|---|---|"]
    for claim, v in verdicts:
        link = _figure_link(out, claim)
        name = f"[{claim.recipe}/{claim.figure}]({link})" if link else f"{claim.recipe}/{claim.figure}"
        md.append(f"| {name} | {claim.paper} | {claim.text} | **{v.status}** | {v.evidence} |")
    worst = sorted((v.disagreement, i) for i, (_, v) in enumerate(verdicts) if v.disagreement > 0)[::-1][:3]
    if worst:
        md += ["", "Furthest from the paper (share of failed checks): " + ", ".join(
            f"`{verdicts[i][0].recipe}/{verdicts[i][0].figure}` ({d:.0%})" for d, i in worst) + "."]
    md += ["", "## Recipes", "", "| recipe | study | measured | reused | already there | failed | time (s) |",
           "|---|---|---:|---:|---:|---:|---:|"]
    for r in runs:
        flag = "" if r["returncode"] == 0 else f" (exit {r['returncode']}, see `{Path(r['log']).relative_to(out)}`)"
        md.append(f"| {r['recipe']}{flag} | `{r['study']}` | {r['measured']} | {r['reused']} | {r['already_in_study']} "
                  f"| {r['failed']} | {r['seconds']:.0f} |")
    table1 = out / "figures" / "table1" / "table1.md"
    if table1.is_file():
        md += ["", "## Table 1", "", table1.read_text()]
    speed = out / "figures" / "pareto_r_inner_beta" / "speedup.md"
    if speed.is_file():
        md += ["", f"## Relative to {_reference_of(trials.get('pareto_r_inner_beta'))}: the (r′, β_t) grid", "",
               speed.read_text()]
    spec = out / "figures" / "loopspec" / "loopspec.md"
    if spec.is_file():
        md += ["", "## LoopSpec: r_draft × r_draft2 (not in the paper)", "", spec.read_text()]
        if (out / "figures" / "loopspec" / "loopspec_readouts.png").is_file():
            md += ["![loopspec_readouts](figures/loopspec/loopspec_readouts.png)", ""]
    md += ["", "## Figures", ""]
    for claim, v in verdicts:
        link = _figure_link(out, claim)
        md += [f"### {claim.paper}: `{claim.recipe}/{claim.figure}`", "", f"*Paper:* {claim.text}", "",
               f"*This run:* **{v.status}**: {v.evidence}.", ""]
        md += [f"![{claim.figure}]({link})", ""] if link else ["(no figure: the study has no data for it)", ""]
    search = out / "figures" / "search_nsga2" / "pareto.png"
    if search.is_file():
        md += ["### NSGA-II search (`search_nsga2`, not a paper figure)", "",
               "![search](figures/search_nsga2/pareto.png)", ""]
    path = out / "report.md"
    path.write_text("\n".join(md) + "\n")
    return path


def analyse(out: Path, scale_name: str, settings: dict[str, Any], embedded: Sequence[str], runs: list[dict],
            overrides: Sequence[str], start: float, say: Callable[[str], None]) -> Path:
    """After the recipes ran (``runs``, as :func:`recdiff.tools.paper.run_recipe` reports them): every figure, every
    claim judged (``verdicts.csv``), ``report.md`` and ``paper.json``; the verdicts said. The report's path."""
    import time

    say("figures:")
    trials = load_studies(out, runs, say)
    write_figures(trials, out, say)
    verdicts = judge_all(trials, [c for c in CLAIMS if any(r["recipe"] == c.recipe for r in runs)])
    pl.DataFrame([{"figure": c.figure, "recipe": c.recipe, "paper": c.paper, "claim": c.text, "status": v.status,
                   "evidence": v.evidence, "disagreement": v.disagreement} for c, v in verdicts]
                 ).write_csv(out / "verdicts.csv")
    seconds = time.monotonic() - start
    report = write_report_md(out, scale_name, settings, embedded, runs, verdicts, trials, seconds, overrides)
    (out / "paper.json").write_text(json.dumps({"scale": scale_name, "settings": settings,
                                                "overrides": list(overrides), "seconds": round(seconds, 1),
                                                "storage": storage_path(out), "runs": runs}, indent=2) + "\n")
    for c, v in verdicts:
        say(f"  {v.status:>12}  {c.recipe}/{c.figure}: {c.text}")
    say("verdicts: " + ", ".join(f"{k} {v}" for k, v in count_outcomes([v for _, v in verdicts]).items()))
    say(f"report: {report} ({seconds / 60:.1f} min)")
    return report
