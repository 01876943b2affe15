"""`write_report`: every applicable figure, Table 1, the speed-up table (every trial relative to the study's reference,
static AR at r=32 by default), tidy data and `report.md` for one study."""
from __future__ import annotations

import sys
import traceback
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import polars as pl
from matplotlib.figure import Figure

from analysis import plots, trace_plots
from analysis.labels import OBJECTIVES, SAMPLER_KEYS, benchmark_name, label, setting
from analysis.loopspec import format_loopspec, loopspec_table, loopspec_trials
from analysis.pareto import hypervolume_interval, knee, noisy_pareto_front, pareto_front
from analysis.reference import reference_label
from analysis.speedup import format_speedup, speedup_table
from analysis.tables import sampler_table
from analysis.trials import check_identities, load_samples, load_trials, resolve, study_name_of
from recdiff.errors import RecdiffError
from recdiff.params import SAMPLER_PARAMS

# (swept parameter, grouping parameter): the paper's one-parameter trade-off figures.
TRADEOFFS: tuple[tuple[str, str | None], ...] = (
    ("r_inner", "beta"), ("epsilon", "beta"),                    # fig:hyperparam_sweeps1
    ("eta", None), ("beta", "beta_schedule"),                    # fig:hyperparam_sweeps3
    ("wavefront", None), ("headway", None),                      # fig:hyperparam_sweeps5
    ("init_scale", None), ("continuous_compute", None),          # fig:hyperparam_sweeps2
)
Builder = Callable[[], Figure]


def _complete(df: pl.DataFrame) -> pl.DataFrame:
    df = df.filter(pl.col("state") == "COMPLETE") if "state" in df.columns else df
    return df.filter(pl.all_horizontal(pl.col(c).is_not_null() for c in OBJECTIVES if c in df.columns))


def varying(df: pl.DataFrame, keys: Iterable[str] = SAMPLER_KEYS) -> list[str]:
    return [k for k in keys if k in df.columns and df[k].drop_nulls().n_unique() > 1]


def one_param_slice(df: pl.DataFrame, param: str, keep: Sequence[str] = ()) -> pl.DataFrame:
    """The trials of one sweep of `param`: the other varying sampler keys (besides `keep`) held
    at the combination that covers the most `param` values (then the most trials)."""
    others = [k for k in varying(df) if k != param and k not in keep]
    if not others:
        return df
    best, best_key = df.clear(), (-1, -1)
    for part in df.partition_by(others, maintain_order=True):
        key = (part[param].drop_nulls().n_unique(), len(part))
        if key > best_key:
            best, best_key = part, key
    return best


def _fig(ncols: int = 1, width: float = 5.0, height: float = 3.4) -> tuple[Figure, Any]:
    with plt.style.context(plots.STYLE):
        fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)
    return fig, list(axes[0])


def _pareto(df: pl.DataFrame) -> Figure:
    fig, (ax,) = _fig(width=6.5, height=3.8)
    plots.plot_pareto(df, ax=ax)
    return fig


def _heatmap(diff: pl.DataFrame) -> Figure:
    fig, axes = _fig(2, width=4.4)
    for ax, value in zip(axes, OBJECTIVES):
        plots.plot_heatmap(diff, value=value, ax=ax)
    return fig


def _tradeoff(df: pl.DataFrame, param: str, group: str | None) -> Figure:
    fig, (ax,) = _fig()
    plots.plot_tradeoff(df, param=param, group=group, ax=ax)
    return fig


def _cache(df: pl.DataFrame) -> Figure:
    fig, (ax,) = _fig()
    plots.plot_cache_sharing(df, ax=ax)
    return fig


# Trace pictures print each cell's token: the first TRACE_POSITIONS generated positions, CELL_IN inches per cell.
TRACE_POSITIONS = 32
CELL_IN = (0.3, 0.2)


def _trace_size(trace: str, min_w: float, min_h: float) -> tuple[float, float]:
    cols, rows = trace_plots.trace_cells(trace, TRACE_POSITIONS)
    return max(min_w, 1.2 + CELL_IN[0] * cols), max(min_h, 1.0 + CELL_IN[1] * rows)


def _stability(trace: str, title: str) -> Figure:
    w, h = _trace_size(trace, 4.6, 3.6)
    with plt.style.context(plots.STYLE):
        fig, axes = plt.subplots(1, 2, figsize=(w + 4.6, h), width_ratios=[w, 4.6])
    trace_plots.plot_token_trace(trace, max_positions=TRACE_POSITIONS, ax=axes[0])
    trace_plots.plot_position_stability(trace, ax=axes[1])
    fig.suptitle(title, fontsize=9)
    return fig


def _latent(trace: str, title: str) -> Figure:
    fig, (ax,) = _fig(width=5.5, height=3.6)
    trace_plots.plot_latent_change(trace, ax=ax)
    fig.suptitle(title, fontsize=9)
    return fig


def _examples(traces: list[tuple[str, str]]) -> Figure:
    sizes = [_trace_size(trace, 3.4, 3.4) for trace, _ in traces]
    with plt.style.context(plots.STYLE):
        fig, axes = plt.subplots(1, len(traces), figsize=(sum(w for w, _ in sizes), max(h for _, h in sizes)),
                                 width_ratios=[w for w, _ in sizes], squeeze=False)
    for ax, (trace, title) in zip(axes[0], traces):
        trace_plots.plot_token_trace(trace, max_positions=TRACE_POSITIONS, ax=ax)
        ax.set_title(title, fontsize=8)
    return fig


def example_traces(traced: list[dict], keys: Sequence[str], n: int = 3) -> list[dict]:
    """Up to `n` traced trials of distinct settings for fig:qualitative_examples. As the paper draws it: the
    default r′ (4) first, then the smallest r′ values (they need more adaptive computation); otherwise the first
    distinct settings."""
    distinct, seen = [], set()
    for r in traced:
        key = tuple(r.get(k) for k in keys)
        if key not in seen:
            seen.add(key)
            distinct.append(r)
    if "r_inner" in keys and len({r.get("r_inner") for r in distinct}) > 1:
        by_r: dict[Any, dict] = {}
        for r in distinct:
            by_r.setdefault(r.get("r_inner"), r)
        order = sorted(by_r, key=lambda v: (v != DEFAULT_R_INNER, v is None, v or 0))
        return [by_r[v] for v in order[:n]]
    return distinct[:n]


DEFAULT_R_INNER = SAMPLER_PARAMS["diffusion"]().r_inner   # the paper's r′ (4), the sampler's default


def _settings_title(row: dict, keys: Sequence[str]) -> str:
    text = ", ".join(setting(k, row[k]) for k in keys if row.get(k) is not None)
    return f"trial {row['number']}" + (f" ({text})" if text else "")


def _trace_rows(df: pl.DataFrame) -> list[dict]:
    rows = []
    for row in df.iter_rows(named=True):
        paths = [p for p in (row.get("trace_paths") or []) if p and Path(p).is_file()]
        if paths:
            rows.append({**row, "trace": paths[0]})
    return rows


def plan_figures(df: pl.DataFrame) -> list[tuple[str, Builder]]:
    """(file stem, builder) for every figure the trials table supports."""
    figs: list[tuple[str, Builder]] = []
    done = _complete(df)
    benches = [b for b in dict.fromkeys(done["benchmark"].to_list())] if "benchmark" in done.columns else [None]
    for bench in benches or [None]:
        sub = done if bench is None or len(benches) == 1 else done.filter(pl.col("benchmark") == bench)
        sfx = "" if len(benches) <= 1 else f"_{bench}"
        diff, _ = plots.split_baselines(sub)
        if diff.is_empty():
            continue
        figs.append((f"pareto{sfx}", lambda s=sub: _pareto(s)))
        if {"r_inner", "beta"} <= set(varying(diff)):
            grid = one_param_slice(diff, "r_inner", keep=["beta"])
            figs.append((f"heatmap{sfx}", lambda g=grid: _heatmap(g)))
            tb = one_param_slice(diff, "beta", keep=["r_inner"])
            figs.append((f"tradeoff{sfx}", lambda t=tb: _tradeoff(t, "beta", "r_inner")))
        for param, group in TRADEOFFS:
            if param not in varying(diff):
                continue
            keep = [group] if group and group in varying(diff) else []
            part = one_param_slice(diff, param, keep)
            if part[param].drop_nulls().n_unique() < 2:
                continue
            g = group if keep and part[group].drop_nulls().n_unique() > 1 else None
            figs.append((f"tradeoff_{param}{sfx}", lambda p=part, a=param, g=g: _tradeoff(
                pl.concat([p, sub.filter(pl.col("sampler").is_in(list(plots.BASELINES)))], how="diagonal_relaxed"),
                a, g)))
    if "kv_cache" in done.columns:
        kv = done.filter(pl.col("kv_cache").is_not_null() & pl.col("kv_cache_bytes").is_not_null())
        # Only the samplers whose trials compare KV modes (usually static AR with/without sharing).
        kv = pl.concat([p for p in kv.partition_by("sampler") if p["kv_cache"].n_unique() > 1] or [kv.clear()])
        if kv["kv_cache"].n_unique() > 1:
            figs.append(("cache_sharing", lambda k=kv: _cache(k)))
    traced = _trace_rows(done)
    if traced:
        keys = varying(done)
        front_knee = knee(plots.split_baselines(done)[0]) if not plots.split_baselines(done)[0].is_empty() else None
        pick = next((r for r in traced if front_knee and r["number"] == front_knee["number"]), traced[0])
        title = _settings_title(pick, keys)
        figs.append(("token_stability", lambda p=pick, t=title: _stability(p["trace"], t)))
        if _has_delta(pick["trace"]):
            figs.append(("latent_change", lambda p=pick, t=title: _latent(p["trace"], t)))
        examples = [(r["trace"], _settings_title(r, keys)) for r in example_traces(traced, keys)]
        figs.append(("qualitative_examples", lambda e=examples: _examples(e)))
    if (spec := readout_trial(done)) is not None:
        title = _settings_title(spec, ["r", "r_draft", "r_draft2"]) + ": which readout's proposal was committed"
        figs.append(("loopspec_readouts", lambda s=spec, t=title: _readouts(s["samples_path"], t)))
    return figs


# LoopSpec's readouts picture: the slice's first READOUT_PROBLEMS problems of one trial
READOUT_PROBLEMS = 32


def _readouts(path: str, title: str) -> Figure:
    accepted, labels = trace_plots.readouts(path, READOUT_PROBLEMS)
    fig, (ax,) = _fig(width=9.0, height=1.2 + 0.16 * max(len(accepted), 4))
    trace_plots.plot_readouts(accepted, labels, ax=ax)
    ax.set_title(title, fontsize=9)
    return fig


def readout_trial(df: pl.DataFrame) -> dict | None:
    """The LoopSpec trial whose readouts the report draws: the fastest (by paired speed-up when all have one) whose
    per-sample table holds them; None without one."""
    spec = loopspec_trials(df)
    if spec.is_empty() or "samples_path" not in spec.columns:
        return None
    speed = "speedup" if "speedup" in spec.columns and spec["speedup"].null_count() == 0 else "tokens_per_s"
    for row in spec.sort(speed, descending=True).iter_rows(named=True):
        path = row.get("samples_path")
        if path and Path(path).is_file() and "accepted" in pl.read_parquet_schema(path):
            return row
    return None


def _has_delta(path: str) -> bool:
    import numpy as np
    with np.load(path) as npz:
        return "delta" in npz.files and bool(np.isfinite(npz["delta"].astype(np.float32)).any())


def _md_frame(df: pl.DataFrame, float_fmt: str = "{:.4g}") -> str:
    def cell(v: Any) -> str:
        return "—" if v is None else float_fmt.format(v) if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.iter_rows()]
    return "\n".join(lines) + "\n"


def _summary(df: pl.DataFrame, name: str, source: Any, figures: list[tuple[str, list[Path]]],
             table_md: str | None, failed: list[str], speedup_md: str | None = None,
             loopspec_md: str | None = None) -> str:
    done = _complete(df)
    where = f"polars DataFrame ({len(df)} rows)" if isinstance(source, pl.DataFrame) else f"`{source}`"
    md = [f"# Study `{name}`", "", f"Source: {where}", ""]
    counts = df.group_by("state").len().sort("state")
    md.append("Trials: " + ", ".join(f"{s} {n}" for s, n in counts.iter_rows()) + "")
    md.append("")
    keys = varying(done)
    for bench in dict.fromkeys(done["benchmark"].to_list()) if not done.is_empty() else []:
        sub = (done.filter(pl.col("benchmark") == bench) if bench is not None
               else done.filter(pl.col("benchmark").is_null()))
        diff, _ = plots.split_baselines(sub)
        if diff.is_empty():
            continue
        front, measured = noisy_pareto_front(diff), pareto_front(diff)
        cols = ["number", "sampler", *keys, "accuracy", "accuracy_lo", "accuracy_hi", "tokens_per_s",
                "tokens_per_s_lo", "tokens_per_s_hi", "speedup", "speedup_lo", "speedup_hi"]
        hv, hv_lo, hv_hi = hypervolume_interval(diff, (0.0, 0.0), missing="point")
        span = f" [{hv_lo:.4g}, {hv_hi:.4g}] with every point at either end of its 95% intervals" \
            if (hv_lo, hv_hi) != (hv, hv) else ""
        md += [f"## Pareto front — {benchmark_name(bench)}", "",
               f"{len(front)} of {len(diff)} diffusion trials are not dominated beyond their 95% intervals in "
               f"({label('accuracy')}, {label('tokens_per_s')}) (one dominates another only when better on both "
               f"axes beyond their intervals; the others tie); {len(measured)} are non-dominated by the measured "
               f"values alone. Hypervolume w.r.t. (0, 0): {hv:.4g}{span}.", ""]
        if (k := knee(diff)) is not None:
            md += [f"Knee: trial {k['number']} — {', '.join(setting(c, k[c]) for c in keys if k.get(c) is not None)}"
                   f" (accuracy {100 * k['accuracy']:.2f}%, {k['tokens_per_s']:.1f} tokens/s).", ""]
        shown = [c for c in cols if c in front.columns and front[c].null_count() < front.height]
        md += [_md_frame(front.with_columns(pl.col("number").is_in(measured["number"].to_list())
                                            .alias("measured front"))
                         .select([*shown, "measured front"])), ""]
    if speedup_md:
        ref = reference_label(df)
        md += [f"## Relative to {ref}", "",
               f"Every complete trial: speed-up = its paired speed-up, timed against {ref} in the same rounds "
               "(`unpaired` for a trial recorded before paired timing: tokens/s measured at different times are not "
               "divided), Δacc = accuracy change in points; each with its 95% interval (the numbers the sweep prints "
               "at its end).", "", speedup_md, ""]
    if table_md:
        md += ["## Sampler comparison (Table 1)", "", table_md, ""]
    if loopspec_md:
        md += ["## LoopSpec", "",
               "Every LoopSpec trial: how often the readout at r_draft (q1) and at r_draft2 (q2) proposed the token "
               "the full-depth readout committed (pooled over the slice), the recurrences a token waited for after "
               "the first (r_draft when q1 was right, r_draft2 when q2 was, r when neither), all lanes' recurrences "
               "per token, the most lanes one sequence held, and its speed.", "", loopspec_md, ""]
    if figures:
        md += ["## Figures", ""]
        for stem, paths in figures:
            png = next((p for p in paths if p.suffix == ".png"), paths[0])
            md += [f"### {stem}", "", f"![{stem}]({png.name})", ""]
    if failed:
        md += ["## Failed figures", "", *[f"- {f}" for f in failed], ""]
    return "\n".join(md)


def write_report(source: Any, out_dir: str | Path | None = None, *, study_name: str | None = None,
                 formats: Sequence[str] = ("png", "pdf"), figures: Collection[str] | None = None,
                 progress: Callable[[str], None] | None = print) -> list[Path]:
    """Write every applicable figure (PNG + PDF; only the stems in `figures` when given), Table 1 (Markdown +
    LaTeX), `trials.parquet`, `samples.parquet` (when per-sample files exist) and `report.md` into `out_dir`
    (default `outputs/<study>/`). Returns the written paths. No `formats` is bad input (a `RecdiffError`, before
    anything is written): a figure is drawn in at least one format; `figures=()` asks for none."""
    if not formats:
        raise RecdiffError("no figure formats given (--formats takes a comma-separated list, e.g. png,pdf; "
                           "a report draws each figure in at least one)")
    say = progress or (lambda _: None)
    if isinstance(source, pl.DataFrame):
        df, name = source, study_name_of(source)
    else:
        res = resolve(source, study_name)
        df = load_trials(res.study if res.study is not None else source, study_name)
        name = res.name
    check_identities(df)   # before anything is written: no figure may mix trials measured differently
    out = Path(out_dir) if out_dir is not None else Path("outputs") / name
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    df.write_parquet(out / "trials.parquet")
    written.append(out / "trials.parquet")
    samples = load_samples(df)
    if not samples.is_empty():
        samples.write_parquet(out / "samples.parquet")
        written.append(out / "samples.parquet")

    plan = [(stem, build) for stem, build in plan_figures(df) if figures is None or stem in figures]
    drawn, failed = [], []
    for i, (stem, build) in enumerate(plan, 1):
        try:
            paths = plots.save_figure(build(), out / stem, formats)
        except Exception as exc:  # one broken figure should not cost the others
            plt.close("all")
            traceback.print_exc(file=sys.stderr)
            failed.append(f"{stem}: {type(exc).__name__}: {exc}")
            say(f"[{i}/{len(plan)}] {stem}: FAILED ({type(exc).__name__}: {exc})")
            continue
        drawn.append((stem, paths))
        written += paths
        say(f"[{i}/{len(plan)}] {stem}: " + ", ".join(p.name for p in paths))

    table_md = None
    try:
        table = sampler_table(df)
    except RecdiffError as exc:
        say(f"table1: skipped ({exc})")
    else:
        table_md = table.to_markdown()
        (out / "table1.md").write_text(table_md)
        (out / "table1.tex").write_text(table.to_latex())
        written += [out / "table1.md", out / "table1.tex"]
        say("table1: table1.md, table1.tex")

    speedup_md, speedup = None, None
    try:
        speedup = speedup_table(df)
    except RecdiffError as exc:
        say(f"speedup: skipped ({exc})")
    else:
        if not speedup["paired"].any() and speedup["delta_accuracy"].null_count() == speedup.height:
            speedup = None
            say("speedup: skipped (no paired speed-up and no reference trial to compare with)")
    if speedup is not None:
        speedup_md = format_speedup(speedup, markdown=True, reference=reference_label(df))
        (out / "speedup.md").write_text(speedup_md)
        speedup.write_csv(out / "speedup.csv")
        written += [out / "speedup.md", out / "speedup.csv"]
        say("speedup: speedup.md, speedup.csv")

    loopspec_md = None
    if not (spec := loopspec_table(df)).is_empty():
        loopspec_md = format_loopspec(spec, reference_label(df))
        (out / "loopspec.md").write_text(loopspec_md)
        written.append(out / "loopspec.md")
        say("loopspec: loopspec.md")

    (out / "report.md").write_text(_summary(df, name, source, drawn, table_md, failed, speedup_md, loopspec_md))
    written.append(out / "report.md")
    say(f"report: {out / 'report.md'}")
    if failed:
        raise RuntimeError(f"{len(failed)} figure(s) failed: " + "; ".join(failed))
    return written
