"""The paper's Table 1 (tab:sampler_comparison): accuracy and t/s per benchmark per sampler
setting, plus a "Relative Diff to AR (r=32)" row, as Markdown and LaTeX (booktabs)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from analysis.intervals import Est, ests, mean
from analysis.labels import (BASELINES, LATEX_LABELS, SAMPLER_KEYS, SAMPLER_NAMES, benchmark_name,
                             fmt_value, setting)
from analysis.load import check_identities
from analysis.pareto import pareto_mask
from recdiff.errors import RecdiffError

REFERENCE_R = 32
PAPER_REFERENCE = "Static AR (r=32)"   # the paper's reference, as `reference_label` names it
_SECTION = {"static": 1, "adaptive": 2, "speculative": 2, "diffusion": 3}


@dataclass
class Row:
    sampler: str                       # sampler name (static, adaptive, speculative, diffusion, ...)
    settings: dict[str, Any]           # the keys that distinguish this row from its siblings
    cells: dict[str, tuple[float, float]]  # benchmark → (accuracy fraction, tokens/s)
    reference: bool = False            # static AR at r=32
    numbers: dict[str, list[int]] = field(default_factory=dict)  # benchmark → the trials averaged in its cells

    @property
    def label(self) -> str:
        name = SAMPLER_NAMES.get(self.sampler, self.sampler)
        return f"{name} ({', '.join(setting(k, v) for k, v in self.settings.items())})" if self.settings else name

    @property
    def latex_label(self) -> str:
        name = _tex_escape(SAMPLER_NAMES.get(self.sampler, self.sampler))
        if not self.settings:
            return name
        inner = ",".join(f"{LATEX_LABELS.get(k, _tex_text(k))}={_tex_escape(fmt_value(v))}" for k, v in self.settings.items())
        return f"{name} ({{\\tiny${inner}$}})"


@dataclass(frozen=True)
class Relative:
    """A row relative to static AR (r=32) on one benchmark: accuracy change in points and the paired speed-up (None:
    its trials were not timed against the reference, the speed-up is unknown), each with its 95% interval."""
    delta: Est
    speedup: Est | None


@dataclass
class SamplerTable:
    benchmarks: list[str]
    rows: list[Row]
    relative: list[tuple[Row, dict[str, Relative]]] = field(default_factory=list)
    reference: str = PAPER_REFERENCE      # what the relative rows are against (`reference_label`)

    def to_frame(self) -> pl.DataFrame:
        """Tidy form: one row per (sampler setting, benchmark)."""
        recs = [{"row": r.label, "sampler": r.sampler, "benchmark": b, "accuracy": acc, "tokens_per_s": tps}
                for r in self.rows for b, (acc, tps) in r.cells.items()]
        schema = {"row": pl.String, "sampler": pl.String, "benchmark": pl.String,
                  "accuracy": pl.Float64, "tokens_per_s": pl.Float64}
        return pl.DataFrame(recs, schema=schema)

    def _relative_label(self, row: Row, tex: bool) -> str:
        if self.reference != PAPER_REFERENCE:
            base = f"Relative Diff to {_tex_escape(self.reference) if tex else self.reference}"
        else:
            base = "Relative Diff to AR ({\\tiny$r=32$})" if tex else f"Relative Diff to AR (r={REFERENCE_R})"
        if len(self.relative) == 1:
            return base
        return f"{base}: {row.latex_label if tex else row.label}"

    def to_markdown(self) -> str:
        head = ["Sampler"] + [f"{benchmark_name(b)} {c}" for b in self.benchmarks for c in ("Acc", "t/s")]
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join([":---"] + ["---:"] * (len(head) - 1)) + "|"]
        for r in self.rows:
            lines.append("| " + " | ".join([r.label] + _cells(r, self.benchmarks)) + " |")
        for r, rel in self.relative:
            vals = [v for b in self.benchmarks for v in _rel_cells(rel.get(b), bold="**")]
            lines.append("| " + " | ".join([f"**{self._relative_label(r, False)}**"] + vals) + " |")
        return "\n".join(lines) + "\n"

    def to_latex(self, caption: str | None = None, label: str = "tab:sampler_comparison") -> str:
        n = len(self.benchmarks)
        out = [r"\begin{table}[t]", r"\small", r"\centering",
               r"\resizebox{\linewidth}{!}{\setlength{\tabcolsep}{1mm}{",
               rf"\begin{{tabular}}{{l*{{{2 * n}}}{{c}}}}", r"\toprule",
               r"\multirow{2}{*}{Sampler} & " + " & ".join(
                   rf"\multicolumn{{2}}{{c}}{{{_tex_escape(benchmark_name(b))}}}" for b in self.benchmarks) + r" \\",
               " ".join(rf"\cmidrule(lr){{{2 + 2 * i}-{3 + 2 * i}}}" for i in range(n)),
               "& " + " & ".join(["Acc & t/s"] * n) + r" \\", r"\midrule"]
        section = None
        for r in self.rows:
            sec = 0 if r.reference else _SECTION.get(r.sampler, 3)
            if section is not None and sec != section:
                out.append(r"\midrule")
            section = sec
            out.append(" & ".join([r.latex_label] + [c.replace("%", r"\%") for c in _cells(r, self.benchmarks)]) + r" \\")
        if self.relative:
            out.append(r"\midrule")
        for r, rel in self.relative:
            vals = [v for b in self.benchmarks for v in _rel_cells(rel.get(b), bold="tex")]
            out.append(" & ".join([self._relative_label(r, True)] + vals) + r" \\")
        out += [r"\bottomrule", r"\end{tabular}}}"]
        if caption:
            out.append(rf"\caption{{{caption}}}")
        out += [rf"\label{{{label}}}", r"\end{table}"]
        return "\n".join(out) + "\n"



def _measured(df: pl.DataFrame, purpose: str) -> pl.DataFrame:
    """COMPLETE trials with both objectives, from one identity per benchmark (else RecdiffError)."""
    check_identities(df)
    if "state" in df.columns:
        df = df.filter(pl.col("state") == "COMPLETE")
    df = df.filter(pl.col("accuracy").is_not_null() & pl.col("tokens_per_s").is_not_null())
    if df.is_empty():
        raise RecdiffError(f"no complete trials with accuracy and tokens_per_s to {purpose}")
    return df

def _cells(r: Row, benchmarks: list[str]) -> list[str]:
    out = []
    for b in benchmarks:
        acc, tps = r.cells.get(b, (None, None))
        out += [f"{100 * acc:.2f}%" if acc is not None else "—", f"{tps:.1f}" if tps is not None else "—"]
    return out


def _rel_cells(rel: Relative | None, bold: str) -> list[str]:
    if rel is None:
        return ["—", "—"]

    def ci(e: Est, spec: str) -> str:
        if not e.known:
            return ""
        text = f"[{e.lo:{spec}}, {e.hi:{spec}}]"
        return f" {text}" if bold == "**" else rf" {{\scriptsize {text}}}"
    if rel.speedup is None:
        speed = "unpaired"
    else:
        speed = f"{rel.speedup.value:.2f}x"
        speed = (f"**{speed}**" if bold == "**" else rf"\textbf{{{speed}}}") + ci(rel.speedup, ".2f")
    return [f"{rel.delta.value:+.2f}" + ci(rel.delta, "+.2f"), speed]


def _tex_escape(s: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#")):
        s = s.replace(a, b)
    return s


def _tex_text(key: str) -> str:
    return rf"\text{{{_tex_escape(key)}}}"


def _varying(df: pl.DataFrame) -> list[str]:
    return [k for k in SAMPLER_KEYS if k in df.columns and df[k].n_unique() > 1]


def _rows_for(df: pl.DataFrame, sampler: str, keys: list[str], benchmarks: list[str]) -> list[Row]:
    sub = df.filter(pl.col("sampler") == sampler)
    if sub.is_empty():
        return []
    group = keys or ["sampler"]
    agg = sub.group_by([*group, "benchmark"], maintain_order=True).agg(
        pl.col("accuracy").cast(pl.Float64).mean(), pl.col("tokens_per_s").cast(pl.Float64).mean(), pl.col("number"))
    rows: dict[tuple, Row] = {}
    for rec in agg.iter_rows(named=True):
        key = tuple(rec[k] for k in group)
        row = rows.setdefault(key, Row(sampler, {k: rec[k] for k in keys}, {}))
        row.cells[rec["benchmark"]] = (rec["accuracy"], rec["tokens_per_s"])
        row.numbers[rec["benchmark"]] = list(rec["number"])
    return sorted(rows.values(), key=lambda r: tuple((v is None, v) for v in r.settings.values()))


def sampler_table(df: pl.DataFrame, benchmarks: list[str] | None = None, relative: str = "best",
                  max_diffusion_rows: int = 6) -> SamplerTable:
    """Table 1 from a trials table. Rows: Static AR at r=32 (the reference), other static depths,
    adaptive / speculative baselines, then diffusion settings (labelled by the sampler keys that
    vary among diffusion trials; beyond `max_diffusion_rows` only settings on some benchmark's
    accuracy–t/s front are kept). Cells average repeated trials of one setting; trials of one benchmark
    measured under different identities (slice, model, ...) are refused, never averaged.

    `relative`: "best" — one relative row for the diffusion row with the highest mean accuracy
    (the paper's conservative default), "each" — one per diffusion row, "none", or a row label."""
    df = _with_defaults(_measured(df, "tabulate"))
    df = df.with_columns(pl.col("benchmark").fill_null("—").cast(pl.String))
    benchmarks = benchmarks or list(dict.fromkeys(df["benchmark"].to_list()))
    df = df.filter(pl.col("benchmark").is_in(benchmarks))

    static_df = df.filter(pl.col("sampler") == "static")
    static_keys = ["r"] if "r" in df.columns else []
    static_keys += [k for k in _varying(static_df) if k != "r"]
    static = _rows_for(df, "static", static_keys, benchmarks)
    # The reference row: its trials are the reference as `reference_trials` picks it (the speed-up table's too).
    ref_numbers = set(reference_trials(df)["number"].to_list())

    def mark(rows: list[Row]) -> list[Row]:
        for r in rows:
            numbers = {n for ns in r.numbers.values() for n in ns}
            r.reference = bool(numbers) and numbers <= ref_numbers
        return rows
    mark(static)
    static.sort(key=lambda r: (not r.reference, r.settings.get("r") is None, r.settings.get("r") or 0))
    rows = static
    for name in ("adaptive", "speculative"):
        rows += _rows_for(df, name, _varying(df.filter(pl.col("sampler") == name)), benchmarks)
    others = [s for s in dict.fromkeys(df["sampler"].to_list()) if s not in BASELINES]
    diffusion: list[Row] = []
    for name in others:
        diffusion += _rows_for(df, name, _varying(df.filter(pl.col("sampler") == name)), benchmarks)
    if len(diffusion) > max_diffusion_rows:
        keep = set()
        for b in benchmarks:
            cand = [r for r in diffusion if b in r.cells]
            mask = pareto_mask([list(r.cells[b]) for r in cand]) if cand else []
            keep |= {id(r) for r, m in zip(cand, mask) if m}
        diffusion = [r for r in diffusion if id(r) in keep]
        diffusion = sorted(diffusion, key=_mean_acc, reverse=True)[:max_diffusion_rows]
        diffusion.sort(key=lambda r: tuple((v is None, v) for v in r.settings.values()))
    rows += diffusion
    mark(rows).sort(key=lambda r: not r.reference)   # stable: the reference first, the sections as they were

    table = SamplerTable(benchmarks, rows, reference=reference_label(df))
    ref = next((r for r in rows if r.reference), None)
    if ref is None or not diffusion or relative == "none":
        return table
    if relative == "each":
        chosen = diffusion
    elif relative == "best":
        chosen = [max(diffusion, key=_mean_acc)]
    else:
        chosen = [r for r in diffusion if r.label == relative]
        if not chosen:
            raise RecdiffError(f"no diffusion row {relative!r} (rows: {', '.join(r.label for r in diffusion)})")
    for r in chosen:
        rel = {}
        for b in benchmarks:
            part = df.filter(pl.col("benchmark") == b)
            ref_trials = reference_trials(part)
            if b not in r.cells or ref_trials.is_empty():
                continue
            mine = part.filter(pl.col("number").is_in(r.numbers[b]))
            speeds = ests(mine, "speedup") if "speedup" in mine.columns else []
            rel[b] = Relative(delta_accuracy(mean(ests(mine, "accuracy")), mean(ests(ref_trials, "accuracy"))),
                              mean(speeds) if speeds and all(e.known for e in speeds) else None)
        table.relative.append((r, rel))
    return table


def _mean_acc(r: Row) -> float:
    return sum(a for a, _ in r.cells.values()) / max(len(r.cells), 1)


# ------------------------------------------------------------------------- relative to static AR (r=32)
# The settings static AR at r=32 runs with as the recorded baseline (recdiff.study.baselines); among several
# r=32 trials the reference is the one with these settings (a missing value counts as the default), else the
# most common value of each.
REFERENCE_SETTINGS: dict[str, Any] = {"kv_cache": "shared", "init_scale": 0.0}


def reference_trials(df: pl.DataFrame) -> pl.DataFrame:
    """The trials of `df` that are the reference point (empty when there is none): those whose sampler is the study's
    reference as their config records it (`run.reference`, column `is_reference`: static AR at r=32 unless the study
    named another); for trials without a recorded config, static AR at r=32 picked by its settings."""
    if "is_reference" in df.columns and df["is_reference"].drop_nulls().len():
        return df.filter(pl.col("is_reference").fill_null(False))
    if "sampler" not in df.columns or "r" not in df.columns:
        return df.clear()
    ref = df.filter((pl.col("sampler") == "static") & (pl.col("r") == REFERENCE_R))
    for key, default in REFERENCE_SETTINGS.items():
        if ref.is_empty() or key not in ref.columns or ref[key].null_count() == ref.height:
            continue
        is_default = (pl.col(key).is_null() | (pl.col(key) == default)).fill_null(False)
        if not ref.filter(is_default).is_empty():
            ref = ref.filter(is_default)
        else:
            common = ref[key].drop_nulls().value_counts(sort=True)[key][0]
            ref = ref.filter(pl.col(key) == common)
    return ref


def reference_label(df: pl.DataFrame) -> str:
    """What the trials of `df` were timed against, as tables and headers name it: "Static AR (r=32)" by default,
    else the study's `run.reference` ("Diff. Sampler (r′=8)"); several references read "their references"."""
    from recdiff.params import parse_sampler
    from recdiff.schema import DEFAULT_REFERENCE

    texts = df["speed_reference"].drop_nulls().unique().to_list() if "speed_reference" in df.columns else []
    if len(texts) > 1:
        return "their references"
    try:
        params = parse_sampler(texts[0] if texts else DEFAULT_REFERENCE)
    except RecdiffError:
        return str(texts[0])
    defaults = {k: d for k, (d, _) in params.spec().items()}
    shown = [setting(k, v) for k, v in params.params().items()
             if v != defaults[k] or (params.name == "static" and k == "r")]
    name = SAMPLER_NAMES.get(params.name, params.name)
    return f"{name} ({', '.join(shown)})" if shown else name


def is_paper_reference(df: pl.DataFrame) -> bool:
    """Whether the trials were timed against the paper's reference, static AR at r=32."""
    return reference_label(df) == PAPER_REFERENCE


def delta_accuracy(acc: Est, ref: Est) -> Est:
    """Accuracy change against the reference in points, with its interval (MOVER from the two Wilson intervals:
    Newcombe's hybrid score interval for a difference of proportions)."""
    return (acc - ref).scaled(100.0)


SPEEDUP_COLUMNS = ("number", "benchmark", "sampler", "setting", "baseline", "reference", "accuracy",
                   "accuracy_low", "accuracy_high", "tokens_per_s", "tokens_per_s_lo", "tokens_per_s_hi", "paired",
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


def _with_defaults(df: pl.DataFrame) -> pl.DataFrame:
    if "benchmark" not in df.columns:
        df = df.with_columns(pl.lit(None, pl.String).alias("benchmark"))
    if "sampler" not in df.columns:
        df = df.with_columns(pl.lit("diffusion").alias("sampler"))
    if "number" not in df.columns:
        df = df.with_row_index("number").with_columns(pl.col("number").cast(pl.Int64))
    return df.with_columns(pl.col("sampler").fill_null("diffusion").cast(pl.String))


def speedup_table(df: pl.DataFrame) -> pl.DataFrame:
    """One row per COMPLETE trial: accuracy and tokens/s with their intervals, and relative to static AR at r=32:

    * `speedup` [`speedup_lo`, `speedup_hi`]: the trial's paired speed-up, timed against the reference in the same
      rounds (`recdiff.timing.paired_timing`); `paired` is false and all three are null for a trial recorded before
      paired timing: its speed-up is unknown (tokens/s measured minutes apart, under other load, are not divided);
    * `delta_accuracy` [lo, hi] = 100 · (accuracy − the reference's), in points, against the mean of
      `reference_trials` of the same benchmark (one identity per benchmark, see `check_identities`; repeats
      averaged, as Table 1's cells); null without a reference, its bounds null without accuracy intervals.

    Rows: baselines first (the reference, static AR by r, adaptive, speculative), then the other trials by number.
    The sweep's closing table, the report, Table 1's relative row and the claims all use these numbers."""
    df = _with_defaults(_measured(df, "compare"))
    keys = {s: _setting_keys(df, s) for s in dict.fromkeys(df["sampler"].to_list())}
    order = {"static": 0, "adaptive": 1, "speculative": 2}
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
                         "accuracy": acc.value, **_bounds("accuracy", acc, ("_low", "_high")),
                         "tokens_per_s": tps.value, **_bounds("tokens_per_s", tps),
                         "paired": sp is not None, "speedup": sp.value if sp else None, **_bounds("speedup", sp),
                         "delta_accuracy": delta.value if delta else None, **_bounds("delta_accuracy", delta),
                         "_key": (not is_ref, not base, order.get(rec["sampler"], 3),
                                  rec.get("r") if rec["sampler"] == "static" and rec.get("r") is not None else 0,
                                  rec["number"] or 0)})
        out += sorted(rows, key=lambda r: r["_key"])
    for r in out:
        r.pop("_key")
    return pl.DataFrame(out, schema=_SPEEDUP_SCHEMA)


def _bounds(name: str, e: Est | None, suffix: tuple[str, str] = ("_lo", "_hi")) -> dict[str, float | None]:
    known = e is not None and e.known
    return {name + suffix[0]: e.lo if known else None, name + suffix[1]: e.hi if known else None}


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
        cells = [str(r["number"]), label, _interval_text(r["accuracy"], r["accuracy_low"], r["accuracy_high"], ".3f"),
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
    fmt = lambda cells: "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([fmt(head), *(fmt(c) for c in body)]) + "\n"
