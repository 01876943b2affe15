"""Figure functions: `(data, ..., ax=None) -> Axes`, one figure each, one style sheet for all.

Artists hold the data exactly as given (accuracy as a fraction, memory in bytes); units are shown
by axis formatters, so what a test reads back from an artist is the column it passed in.
Diffusion trials are the points; baseline samplers (static AR, adaptive, speculative, LoopSpec) are reference markers:
on the Pareto figure every static depth recorded (static AR r=4 and r=8 are the depth trade-off), elsewhere r=32
only, as in the paper. An accuracy scale (axis or colour bar) stays within [0, 1] while covering the data.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, PercentFormatter

from analysis.intervals import group_means, interval_columns
from analysis.labels import BASELINES, DIRECTIONS, SAMPLER_KEYS, SAMPLER_NAMES, fmt_value, label, setting
from analysis.pareto import pareto_front, with_noisy_pareto
from recdiff.errors import RecdiffError

STYLE = Path(__file__).with_name("style.mplstyle")
REFERENCE_R = 32  # the paper's static AR reference depth
_BASELINE_MARKERS = {"static": "s", "adaptive": "^", "speculative": "D", "loopspec": "P"}


def styled(fn: Callable[..., Axes]) -> Callable[..., Axes]:
    """Run a figure function under the shared style sheet (artists read rcParams when created)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Axes:
        with plt.style.context(STYLE):
            return fn(*args, **kwargs)
    return wrapper


def new_axes(ax: Axes | None, figsize: tuple[float, float] | None = None) -> Axes:
    return ax if ax is not None else plt.figure(figsize=figsize).add_subplot()


def save_figure(fig: Figure, base: Path, formats: Sequence[str] = ("png", "pdf")) -> list[Path]:
    """Write `base.png`, `base.pdf`, ... and close the figure."""
    base.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    with plt.style.context(STYLE):
        for ext in formats:
            paths.append(base.with_suffix(f".{ext}"))
            fig.savefig(paths[-1])
    plt.close(fig)
    return paths


# ----------------------------------------------------------------------------- data helpers
def _complete(df: pl.DataFrame, *cols: str) -> pl.DataFrame:
    """COMPLETE rows with finite values in `cols`."""
    if "state" in df.columns:
        df = df.filter(pl.col("state") == "COMPLETE")
    for c in cols:
        if c not in df.columns:
            raise RecdiffError(f"no column {c!r} to plot (columns: {', '.join(df.columns)})")
        if df.schema[c].is_numeric():
            df = df.filter(pl.col(c).is_not_null() & pl.col(c).cast(pl.Float64).is_finite())
        else:
            df = df.filter(pl.col(c).is_not_null())
    return df


def split_baselines(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(diffusion trials, baseline trials); without a `sampler` column everything is diffusion."""
    if "sampler" not in df.columns:
        return df, df.clear()
    is_base = pl.col("sampler").is_in(list(BASELINES)).fill_null(False)
    return df.filter(~is_base), df.filter(is_base)


def baseline_label(row: dict) -> str:
    name = SAMPLER_NAMES.get(row.get("sampler"), str(row.get("sampler")))
    return f"{name} (r={fmt_value(row['r'])})" if row.get("sampler") == "static" and row.get("r") is not None else name


def _format_axis(ax: Axes, which: str, key: str) -> None:
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xlabel if which == "x" else ax.set_ylabel)(label(key))
    if key in ("accuracy", "accuracy_lo", "accuracy_hi"):
        axis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=None))
        clamp_accuracy_axis(ax, which)
    elif key.endswith("_bytes"):
        axis.set_major_formatter(FuncFormatter(lambda v, _: _bytes(v)))


def clamp_accuracy_axis(ax: Axes, which: str) -> None:
    """Stop an accuracy axis at 0 and 1: autoscaling pads past the data (past 100% above points at 100%). The data lie
    in [0, 1], so the clamped limits still cover them; markers on a limit are drawn whole (not clipped by the axes)."""
    get, put = (ax.get_xlim, ax.set_xlim) if which == "x" else (ax.get_ylim, ax.set_ylim)
    lo, hi = get()
    put(max(lo, 0.0), min(hi, 1.0))
    for artist in (*ax.collections, *ax.lines):
        artist.set_clip_on(False)


def accuracy_limits(values: np.ndarray, span: float = 0.1) -> tuple[float, float]:
    """(vmin, vmax) of an accuracy colour bar: the data's range, at least `span` wide, inside [0, 1] (matplotlib
    widens a flat grid at 1.0 to 0.9-1.1)."""
    lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
    lo, hi = min(lo, max(hi - span, 0.0)), max(hi, min(lo + span, 1.0))
    return max(lo, 0.0), min(hi, 1.0)


def _bytes(v: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:g} B"


def _yerr(df: pl.DataFrame, y: str) -> np.ndarray | None:
    """Asymmetric error bars of column `y` from its interval columns (`analysis.intervals.interval_columns`) when
    present (nulls → no bar)."""
    lo, hi = interval_columns(y)
    if lo not in df.columns or hi not in df.columns or df[lo].is_null().all():
        return None
    yv = df[y].cast(pl.Float64).to_numpy()
    low = df[lo].cast(pl.Float64).fill_null(float("nan")).to_numpy()
    high = df[hi].cast(pl.Float64).fill_null(float("nan")).to_numpy()
    return np.nan_to_num(np.vstack([yv - low, high - yv]), nan=0.0).clip(min=0.0)


def _palette(n: int, kind: str = "qualitative") -> list:
    import seaborn as sns  # imported lazily: it is slow and only colours are needed
    return sns.color_palette("flare" if kind == "sequential" else "husl", max(n, 1))


def _sort_key(v: Any) -> tuple:
    return (v is None, str(type(v)), v if v is not None else 0)


def draw_baselines(ax: Axes, df: pl.DataFrame, x: str, y: str, reference_line: bool = True,
                   static_r: Collection[int] | None = (REFERENCE_R,)) -> list[str]:
    """Baseline trials as reference markers, mean over repeats with the interval of the mean (error bars when
    recorded), one marker per setting (sampler + the keys that vary among its trials). Static AR is drawn at the
    depths `static_r` (None: every depth recorded); when several are drawn, each is marked "r=<r>" beside its
    marker. Returns the labels drawn; the first static r=32 setting also gets a horizontal reference line at its
    `y`."""
    _, base = split_baselines(df)
    if base.is_empty() or x not in base.columns or y not in base.columns:
        return []
    base = _complete(base, x, y)
    if "r" in base.columns and static_r is not None:
        base = base.filter((pl.col("sampler") != "static") | pl.col("r").is_in(list(static_r)))
    drawn, lined = [], False
    for part in base.partition_by("sampler", maintain_order=True):
        keys = ["sampler", *(k for k in SAMPLER_KEYS if k in part.columns and part[k].drop_nulls().n_unique() > 1)]
        agg = group_means(part, keys, [x, y])
        if "r" in part.columns and "r" not in keys:  # one depth: for the "Static AR (r=32)" label
            agg = agg.with_columns(pl.lit(part["r"].drop_nulls().first()).alias("r"))
        bars = {"yerr": _yerr(agg, y), "xerr": _yerr(agg, x)}
        for i, g in enumerate(agg.iter_rows(named=True)):
            extra = [setting(k, g[k]) for k in keys[1:] if k != "r" and g[k] is not None]
            name = baseline_label(g) + (f" [{', '.join(extra)}]" if extra else "")
            ax.scatter([g[x]], [g[y]], marker=_BASELINE_MARKERS.get(g["sampler"], "X"), s=45, color="0.2",
                       edgecolor="white", linewidth=0.6, zorder=4, label=name)
            for axis, err in bars.items():
                if err is not None:
                    ax.errorbar([g[x]], [g[y]], fmt="none", ecolor="0.45", elinewidth=0.7, zorder=2,
                                **{axis: err[:, i:i + 1]})
            if g["sampler"] == "static" and "r" in keys:   # several depths share one marker: name each
                ax.annotate(f"r={fmt_value(g['r'])}", (g[x], g[y]), textcoords="offset points", xytext=(5, 4),
                            fontsize=7, color="0.2")
            if reference_line and g["sampler"] == "static" and g.get("r") in (None, REFERENCE_R) and not lined:
                ax.axhline(g[y], color="0.35", linestyle=":", linewidth=1.0, zorder=1)
                lined = True
            drawn.append(name)
    return drawn


def legend(ax: Axes, **kw: Any) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**{"loc": "best", **kw})


# ----------------------------------------------------------------------------- study figures
@styled
def plot_pareto(df: pl.DataFrame, x: str = "tokens_per_s", y: str = "accuracy",
                hue: str | Sequence[str] = ("r_inner", "beta"), directions: Sequence[str] = DIRECTIONS,
                frontier: bool = True, errorbars: bool = True, baselines: bool = True,
                static_r: Collection[int] | None = None, ax: Axes | None = None) -> Axes:
    """Accuracy vs throughput of the diffusion trials, coloured by (r′, β_t) (fig:pareto).

    `ax.collections[0]` holds every diffusion point (row order of `df`), then the error bars of `y` and of `x`
    (their 95% intervals, when recorded). The front with noise: every trial that no other dominates beyond the
    intervals (ties included) is ringed (a collection labelled "not dominated beyond the 95% intervals"), and a line
    ("Pareto front") runs through the non-dominated points of the measured values sorted by `x`; baselines are extra
    markers (static AR at every depth recorded unless `static_r` names some). The axes cover every point and bar,
    the accuracy axis within [0, 1]."""
    ax = new_axes(ax, (6.0, 3.6))
    diff, _ = split_baselines(df)
    diff = _complete(diff, x, y)
    hue = [h for h in ([hue] if isinstance(hue, str) else hue) if h in diff.columns]
    keys = diff.select(hue).rows() if hue else [()] * len(diff)
    groups = sorted(set(keys), key=lambda k: tuple(_sort_key(v) for v in k))
    colours = dict(zip(groups, _palette(len(groups))))
    ax.scatter(diff[x].to_numpy(), diff[y].to_numpy(), c=[colours[k] for k in keys] or None,
               s=22, zorder=3, edgecolor="white", linewidth=0.4)
    # Legend proxies (not added to the axes, so ax.collections holds only plotted data).
    proxies = [Line2D([], [], linestyle="", marker="o", markersize=4.5, color=colours[k],
                      label=", ".join(setting(h, v) for h, v in zip(hue, k))) for k in groups if hue]
    if errorbars and (yerr := _yerr(diff, y)) is not None:
        ax.errorbar(diff[x].to_numpy(), diff[y].to_numpy(), yerr=yerr, fmt="none", ecolor="0.6",
                    elinewidth=0.7, zorder=2)
    if errorbars and (xerr := _yerr(diff, x)) is not None:
        ax.errorbar(diff[x].to_numpy(), diff[y].to_numpy(), xerr=xerr, fmt="none", ecolor="0.6",
                    elinewidth=0.7, zorder=2)
    if frontier and len(diff):
        ties = with_noisy_pareto(diff, (y, x), directions[::-1], name="_front").filter(pl.col("_front"))
        ax.scatter(ties[x].to_numpy(), ties[y].to_numpy(), s=60, facecolors="none", edgecolors="0.15",
                   linewidth=0.8, zorder=4, label="not dominated beyond the 95% intervals")
        front = pareto_front(diff, (x, y), directions).sort(x)
        ax.plot(front[x].to_numpy(), front[y].to_numpy(), color="0.15", linewidth=1.0, zorder=2,
                label="Pareto front")
    if baselines:
        draw_baselines(ax, df, x, y, static_r=static_r)
    _format_axis(ax, "x", x)
    _format_axis(ax, "y", y)
    handles, _ = ax.get_legend_handles_labels()
    if proxies or handles:
        ax.legend(handles=proxies + handles, loc="center left", bbox_to_anchor=(1.01, 0.5),
                  ncols=1 if len(proxies) <= 14 else 2)
    return ax


@styled
def plot_heatmap(df: pl.DataFrame, value: str = "accuracy", row: str = "r_inner", col: str = "beta",
                 cmap: str | None = None, annotate: bool = True, ax: Axes | None = None) -> Axes:
    """Mean `value` over the `row` × `col` grid of diffusion trials (fig:heatmap, fig:tradeoff).

    `ax.images[0].get_array()` is the grid: rows = sorted `row` values (top to bottom), columns =
    sorted `col` values, NaN-masked where no trial exists. An accuracy colour bar spans the data within [0, 1]."""
    ax = new_axes(ax)
    diff, _ = split_baselines(df)
    diff = _complete(diff, value, row, col)
    rows = sorted(diff[row].unique().to_list(), key=_sort_key)
    cols = sorted(diff[col].unique().to_list(), key=_sort_key)
    grid = np.full((len(rows), len(cols)), np.nan)
    for r_val, c_val, v in diff.group_by([row, col]).agg(pl.col(value).cast(pl.Float64).mean()).iter_rows():
        grid[rows.index(r_val), cols.index(c_val)] = v
    import seaborn  # noqa: F401  (registers the "crest"/"flare" colormaps with matplotlib)
    limits = accuracy_limits(grid) if value == "accuracy" and np.isfinite(grid).any() else (None, None)
    img = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap or ("crest" if value == "accuracy" else "flare"),
                    aspect="auto", vmin=limits[0], vmax=limits[1])
    ax.set_xticks(range(len(cols)), [fmt_value(c) for c in cols])
    ax.set_yticks(range(len(rows)), [fmt_value(r) for r in rows])
    ax.set_xlabel(label(col))
    ax.set_ylabel(label(row))
    ax.grid(False)
    ax.set_title(label(value))
    cbar = ax.figure.colorbar(img, ax=ax, fraction=0.05, pad=0.02)
    if value == "accuracy":
        cbar.formatter = PercentFormatter(xmax=1.0, decimals=None)
        cbar.update_ticks()
    if annotate and grid.size and np.isfinite(grid).any():
        mid = (img.norm.vmin + img.norm.vmax) / 2   # white text on the darker half of the colour map
        for (i, j), v in np.ndenumerate(grid):
            if np.isfinite(v):
                text = f"{100 * v:.1f}" if value == "accuracy" else f"{v:.3g}"
                ax.text(j, i, text, ha="center", va="center", fontsize=6.5,
                        color="white" if v > mid else "black")
    return ax


@styled
def plot_tradeoff(df: pl.DataFrame, param: str, x: str = "tokens_per_s", y: str = "accuracy",
                  group: str | None = None, annotate: bool = True, baselines: bool = True,
                  ax: Axes | None = None) -> Axes:
    """One-parameter trade-off curve(s) (fig:hyperparam_sweeps1/2/3/5, fig:tradeoff).

    One line per `group` value through the diffusion trials ordered by `param` (repeats of a
    setting averaged, with the interval of the mean), each point annotated with its `param` value;
    `ax.lines[i]` is group i in sorted order, its error bars on both axes (95% intervals, when recorded)
    in `ax.collections`. Slice the study to one sweep first (see `analysis.report.one_param_slice`)."""
    ax = new_axes(ax)
    diff, _ = split_baselines(df)
    diff = _complete(diff, x, y, param)
    keys = [group, param] if group else [param]
    agg = group_means(diff, keys, [x, y])
    groups = sorted(agg[group].unique().to_list(), key=_sort_key) if group else [None]
    colours = _palette(len(groups), "sequential" if len(groups) > 2 else "qualitative") if group else ["C0"]
    for colour, g in zip(colours, groups):
        sub = agg.filter(pl.col(group) == g) if group else agg
        sub = sub.sort(param)
        ax.plot(sub[x].to_numpy(), sub[y].to_numpy(), marker="o", color=colour,
                label=setting(group, g) if group else label(param))
        for err in ({"yerr": _yerr(sub, y)}, {"xerr": _yerr(sub, x)}):
            if next(iter(err.values())) is not None:
                ax.errorbar(sub[x].to_numpy(), sub[y].to_numpy(), fmt="none", ecolor=colour, elinewidth=0.7,
                            alpha=0.6, **err)
        if annotate:
            for px, py, pv in zip(sub[x], sub[y], sub[param]):
                ax.annotate(fmt_value(pv), (px, py), textcoords="offset points", xytext=(3, 3),
                            fontsize=6.5, color=colour)
    if baselines:
        draw_baselines(ax, df, x, y)
    _format_axis(ax, "x", x)
    _format_axis(ax, "y", y)
    ax.set_title(f"varying {label(param)}")
    legend(ax)
    return ax


@styled
def plot_cache_sharing(df: pl.DataFrame, memory: str = "kv_cache_bytes", y: str = "accuracy",
                       hue: str = "kv_cache", annotate: str | None = "r", ax: Axes | None = None) -> Axes:
    """Accuracy vs KV-cache memory, one marker set per `kv_cache` mode (fig:cache_sharing).

    All samplers are drawn (the comparison is usually static AR with and without sharing);
    `ax.collections[i]` is mode i in sorted order; x is in bytes, labelled in KiB/MiB/GiB."""
    ax = new_axes(ax)
    data = _complete(df, memory, y, hue)
    modes = sorted(data[hue].unique().to_list(), key=_sort_key)
    markers = ["o", "s", "^", "D"]
    for i, (mode, colour) in enumerate(zip(modes, _palette(len(modes)))):
        sub = data.filter(pl.col(hue) == mode)
        ax.scatter(sub[memory].to_numpy(), sub[y].to_numpy(), color=colour, marker=markers[i % 4],
                   s=28, zorder=3, label=setting(hue, mode))
        if annotate and annotate in data.columns and data[annotate].drop_nulls().n_unique() > 1:
            for px, py, pv in zip(sub[memory], sub[y], sub[annotate]):
                if pv is not None:
                    ax.annotate(setting(annotate, pv), (px, py), textcoords="offset points",
                                xytext=(3, 3), fontsize=6.5, color=colour)
    if _yerr(data, y) is not None:
        for mode, colour in zip(modes, _palette(len(modes))):
            sub = data.filter(pl.col(hue) == mode)
            ax.errorbar(sub[memory].to_numpy(), sub[y].to_numpy(), yerr=_yerr(sub, y), fmt="none",
                        ecolor=colour, elinewidth=0.7, alpha=0.7)
    values = data[memory].cast(pl.Float64).to_numpy()
    if len(values) and values.min() > 0 and values.max() / values.min() > 20:
        ax.set_xscale("log", base=2)  # sharing saves a factor r: log2 ticks land on whole KiB/MiB
    _format_axis(ax, "x", memory)
    _format_axis(ax, "y", y)
    legend(ax)
    return ax
