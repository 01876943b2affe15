"""The paper's Table 1 (tab:sampler_comparison): accuracy and t/s per benchmark per sampler
setting, plus a "Relative Diff to AR (r=32)" row, as Markdown and LaTeX (booktabs)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from analysis.intervals import Est, ests, mean
from analysis.labels import BASELINES, LATEX_LABELS, SAMPLER_KEYS, SAMPLER_NAMES, benchmark_name, fmt_value, setting
from analysis.pareto import pareto_mask
from analysis.reference import (
    PAPER_REFERENCE,
    REFERENCE_R,
    comparable,
    delta_accuracy,
    reference_label,
    reference_trials,
)
from recdiff.errors import RecdiffError

_SECTION = {"static": 1, "adaptive": 2, "speculative": 2, "loopspec": 2, "diffusion": 3}


@dataclass
class Row:
    sampler: str                       # sampler name (static, adaptive, speculative, loopspec, diffusion, ...)
    settings: dict[str, Any]           # the keys that distinguish this row from its siblings
    cells: dict[str, tuple[float, float]]  # benchmark → (accuracy fraction, tokens/s)
    reference: bool = False            # static AR at r=32
    numbers: dict[str, list[int]] = field(default_factory=dict)  # benchmark → the trials averaged in its cells

    @property
    def shown(self) -> dict[str, Any]:
        """The settings a label names: an unset one (None, the sampler's own choice, as LoopSpec's lone readout) is
        left out."""
        return {k: v for k, v in self.settings.items() if v is not None}

    @property
    def label(self) -> str:
        name = SAMPLER_NAMES.get(self.sampler, self.sampler)
        return f"{name} ({', '.join(setting(k, v) for k, v in self.shown.items())})" if self.shown else name

    @property
    def latex_label(self) -> str:
        name = _tex_escape(SAMPLER_NAMES.get(self.sampler, self.sampler))
        if not self.shown:
            return name
        inner = ",".join(f"{LATEX_LABELS.get(k, _tex_text(k))}={_tex_escape(fmt_value(v))}"
                         for k, v in self.shown.items())
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
            out.append(" & ".join([r.latex_label] + [c.replace("%", r"\%") for c in _cells(r, self.benchmarks)])
                       + r" \\")
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
    df = comparable(df, "tabulate")
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
    for name in BASELINES[1:]:   # adaptive, speculative, LoopSpec
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
