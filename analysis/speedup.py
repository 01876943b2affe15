"""The speed-up table: one row per COMPLETE trial, relative to the study's reference, with every number's 95%
interval; the sweep's closing print (``sweep.py``), the report's ``speedup.md`` and the claims read it."""
from __future__ import annotations

import polars as pl

from analysis.intervals import Est, ests, interval_columns, mean
from analysis.labels import BASELINES, SAMPLER_KEYS, SAMPLER_NAMES, benchmark_name, setting
from analysis.reference import PAPER_REFERENCE, comparable, delta_accuracy, reference_trials

SPEEDUP_COLUMNS = ("number", "benchmark", "sampler", "setting", "baseline", "reference", "accuracy",
                   "accuracy_lo", "accuracy_hi", "tokens_per_s", "tokens_per_s_lo", "tokens_per_s_hi", "paired",
                   "speedup", "speedup_lo", "speedup_hi", "delta_accuracy", "delta_accuracy_lo", "delta_accuracy_hi")
_SPEEDUP_SCHEMA = {**dict.fromkeys(SPEEDUP_COLUMNS, pl.Float64), "number": pl.Int64, "benchmark": pl.String,
                   "sampler": pl.String, "setting": pl.String, "baseline": pl.Boolean, "reference": pl.Boolean,
                   "paired": pl.Boolean}


def _setting_keys(df: pl.DataFrame, sampler: str) -> list[str]:
    sub = df.filter(pl.col("sampler") == sampler)
    keys = [k for k in SAMPLER_KEYS if k in sub.columns and sub[k].drop_nulls().n_unique() > 1]
    if sampler == "static" and "r" in sub.columns and "r" not in keys:
        keys.insert(0, "r")
    if sampler == "diffusion" and not keys and "r_inner" in sub.columns:
        keys = ["r_inner"]
    return keys


def speedup_table(df: pl.DataFrame) -> pl.DataFrame:
    """One row per COMPLETE trial: accuracy and tokens/s with their intervals, and relative to static AR at r=32:

    * `speedup` [`speedup_lo`, `speedup_hi`]: the trial's paired speed-up, timed against the reference in the same
      rounds (`recdiff.timing.paired_timing`); `paired` is false and all three are null for a trial recorded before
      paired timing: its speed-up is unknown (tokens/s measured minutes apart, under other load, are not divided);
    * `delta_accuracy` [lo, hi] = 100 · (accuracy − the reference's), in points, against the mean of
      `reference_trials` of the same benchmark (one identity per benchmark, see `check_identities`; repeats
      averaged, as Table 1's cells); null without a reference, its bounds null without accuracy intervals.

    Rows: baselines first (the reference, static AR by r, adaptive, speculative, LoopSpec), then the other trials by
    number.
    The sweep's closing table, the report, Table 1's relative row and the claims all use these numbers."""
    df = comparable(df, "compare")
    keys = {s: _setting_keys(df, s) for s in dict.fromkeys(df["sampler"].to_list())}
    order = {name: i for i, name in enumerate(BASELINES)}   # static, adaptive, speculative, LoopSpec
    out = []
    for part in df.partition_by("benchmark", maintain_order=True, include_key=True):
        ref = reference_trials(part)
        ref_numbers = set(ref["number"].to_list())
        ref_acc = mean(ests(ref, "accuracy")) if not ref.is_empty() else None
        accs, speeds = ests(part, "accuracy"), ests(part, "tokens_per_s")
        paired = ests(part, "speedup") if "speedup" in part.columns else [None] * part.height
        rows = []
        for rec, acc, tps, sp in zip(part.iter_rows(named=True), accs, speeds, paired):
            sp = sp if sp is not None and sp.known else None
            delta = delta_accuracy(acc, ref_acc) if ref_acc is not None else None
            is_ref = rec["number"] in ref_numbers
            base = bool(rec.get("baseline")) or rec["sampler"] in BASELINES
            text = ", ".join(setting(k, rec[k]) for k in keys[rec["sampler"]] if rec.get(k) is not None)
            rows.append({"number": rec["number"], "benchmark": rec["benchmark"], "sampler": rec["sampler"],
                         "setting": text, "baseline": bool(rec.get("baseline")), "reference": is_ref,
                         "accuracy": acc.value, **_bounds("accuracy", acc),
                         "tokens_per_s": tps.value, **_bounds("tokens_per_s", tps),
                         "paired": sp is not None, "speedup": sp.value if sp else None, **_bounds("speedup", sp),
                         "delta_accuracy": delta.value if delta else None, **_bounds("delta_accuracy", delta),
                         "_key": (not is_ref, not base, order.get(rec["sampler"], len(order)),
                                  rec.get("r") if rec["sampler"] == "static" and rec.get("r") is not None else 0,
                                  rec["number"] or 0)})
        out += sorted(rows, key=lambda r: r["_key"])
    for r in out:
        r.pop("_key")
    return pl.DataFrame(out, schema=_SPEEDUP_SCHEMA)


def _bounds(name: str, e: Est | None) -> dict[str, float | None]:
    known = e is not None and e.known
    lo, hi = interval_columns(name)
    return {lo: e.lo if known else None, hi: e.hi if known else None}


def speedup_est(row: dict) -> Est | None:
    """The paired speed-up of a speed-up table row, or None when it is unpaired."""
    return Est(row["speedup"], row["speedup_lo"], row["speedup_hi"]) if row.get("paired") else None


def _interval_text(value: float, lo: float | None, hi: float | None, spec: str, unit: str = "") -> str:
    text = f"{value:{spec}}{unit}"
    return text if lo is None or hi is None else f"{text} [{lo:{spec}}, {hi:{spec}}]"


def format_speedup(table: pl.DataFrame, markdown: bool = False, reference: str = PAPER_REFERENCE) -> str:
    """The speed-up table as aligned text (the sweep's closing print) or Markdown (the report). Columns are separated
    by at least two spaces (a cell holds single spaces only); an unpaired speed-up reads `unpaired`. `reference`: what
    the speed-ups are against (`reference_label` of the trials)."""
    head = ["trial", "sampler", "accuracy [95% CI]", "tokens/s [95% CI]",
            f"speed-up vs {reference} [95% CI]", "Δacc (pts) [95% CI]"]
    benches = table["benchmark"].unique(maintain_order=True).to_list()
    if len(benches) > 1:
        head.insert(1, "benchmark")
    body = []
    for r in table.iter_rows(named=True):
        name = SAMPLER_NAMES.get(r["sampler"], r["sampler"])
        label = f"{name} ({r['setting']})" if r["setting"] else name
        if r["reference"]:
            label += " = reference"
        elif r["baseline"]:
            label += " [baseline]"
        cells = [str(r["number"]), label, _interval_text(r["accuracy"], r["accuracy_lo"], r["accuracy_hi"], ".3f"),
                 _interval_text(r["tokens_per_s"], r["tokens_per_s_lo"], r["tokens_per_s_hi"], ".1f"),
                 _interval_text(r["speedup"], r["speedup_lo"], r["speedup_hi"], ".2f", "x") if r["paired"]
                 else "unpaired",
                 "—" if r["delta_accuracy"] is None else
                 _interval_text(r["delta_accuracy"], r["delta_accuracy_lo"], r["delta_accuracy_hi"], "+.1f")]
        if len(benches) > 1:
            cells.insert(1, benchmark_name(r["benchmark"]))
        body.append(cells)
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---:", ":---"] + ["---:"] * (len(head) - 2)) + "|"]
        return "\n".join(lines + ["| " + " | ".join(c) + " |" for c in body]) + "\n"
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    left = {1, 2} if len(benches) > 1 else {1}
    fmt = lambda cells: "  ".join(c.ljust(w) if i in left else c.rjust(w)
                                  for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([fmt(head), *(fmt(c) for c in body)]) + "\n"
