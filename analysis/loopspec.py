"""LoopSpec's trials and what explains their speed: one row per trial with its readout depths, how often each early
readout was right (the trial's `q1_acceptance`, `q2_acceptance`: pooled over its slice), the recurrences a token
waited for, all lanes' recurrences per token, the widest it grew, and its speed with the paired speed-up against the
study's reference. The report's section "LoopSpec" and `loopspec.md`."""
from __future__ import annotations

import polars as pl

from analysis.labels import benchmark_name
from analysis.reference import comparable
from recdiff.errors import RecdiffError

READOUT_COLUMNS = ("q1_acceptance", "q2_acceptance", "sequential_per_token", "core_passes_per_token", "peak_lanes")
COLUMNS = ("number", "benchmark", "r", "r_draft", "r_draft2", *READOUT_COLUMNS, "tokens_per_s", "tokens_per_s_lo",
           "tokens_per_s_hi", "speedup", "speedup_lo", "speedup_hi")


def loopspec_trials(df: pl.DataFrame) -> pl.DataFrame:
    """The COMPLETE LoopSpec trials of `df` with both objectives (empty when there are none)."""
    if "sampler" not in df.columns:
        return df.clear()
    try:
        return comparable(df.filter(pl.col("sampler") == "loopspec"), "tabulate")
    except RecdiffError:   # none complete
        return df.clear()


def loopspec_table(df: pl.DataFrame) -> pl.DataFrame:
    """One row per LoopSpec trial, by benchmark, r_draft and r_draft2 (none first): :data:`COLUMNS`, null where a trial
    did not record one."""
    spec = loopspec_trials(df)
    spec = spec.with_columns(pl.lit(None).alias(c) for c in COLUMNS if c not in spec.columns)
    return spec.select(COLUMNS).sort("benchmark", "r_draft", "r_draft2", "number", nulls_last=False)


def _cell(value: float | None, spec: str, lo: float | None = None, hi: float | None = None, unit: str = "") -> str:
    if value is None:
        return "—"
    text = f"{value:{spec}}{unit}"
    return text if lo is None or hi is None else f"{text} [{lo:{spec}}, {hi:{spec}}]"


def format_loopspec(table: pl.DataFrame, reference: str) -> str:
    """The table as Markdown; `reference`: what the speed-ups are against (`reference_label` of the trials)."""
    several = table["benchmark"].n_unique() > 1
    head = ["trial", *(["benchmark"] if several else []), "r", "r_draft", "r_draft2", "q1 acceptance",
            "q2 acceptance", "sequential recurrences / token", "core passes / token", "peak lanes",
            "tokens/s [95% CI]", f"speed-up vs {reference} [95% CI]"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" for _ in head) + "|"]
    for r in table.iter_rows(named=True):
        cells = [str(r["number"]), *([benchmark_name(r["benchmark"])] if several else []), _cell(r["r"], "d"),
                 _cell(r["r_draft"], "d"), _cell(r["r_draft2"], "d"), _cell(r["q1_acceptance"], ".3f"),
                 _cell(r["q2_acceptance"], ".3f"), _cell(r["sequential_per_token"], ".2f"),
                 _cell(r["core_passes_per_token"], ".1f"), _cell(r["peak_lanes"], "d"),
                 _cell(r["tokens_per_s"], ".1f", r["tokens_per_s_lo"], r["tokens_per_s_hi"]),
                 _cell(r["speedup"], ".2f", r["speedup_lo"], r["speedup_hi"], "x")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
