"""The measurements claims are judged on: completed and diffusion rows, means per setting with their intervals, trends
(Spearman ρ with an interval), accuracy that cannot separate trials, and comparisons of two intervals."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from analysis.intervals import Est, common_value, decide, ests, group_means, row_est, spearman_interval
from analysis.labels import label
from analysis.pareto import hypervolume_interval
from analysis.plots import split_baselines
from analysis.verdicts import Check, Untestable

TREND = 0.5        # |Spearman ρ| a "rises"/"falls with" claim needs
NOISE_BETA = 0.2   # the paper's "moderate noise"
SPEED_NAMES = {"speedup": "paired speed-up", "tokens_per_s": "tokens/s"}


def completed(df: pl.DataFrame) -> pl.DataFrame:
    return df.filter(pl.col("state") == "COMPLETE") if "state" in df.columns else df


def diffusion_rows(df: pl.DataFrame) -> pl.DataFrame:
    done = completed(df)
    return split_baselines(done.filter(pl.col("accuracy").is_not_null() & pl.col("tokens_per_s").is_not_null()))[0]


def means_by(df: pl.DataFrame, param: str, *metrics: str) -> pl.DataFrame:
    """Mean of each metric per value of `param` (other keys averaged over) with its interval, sorted by `param`."""
    if param not in df.columns or df[param].drop_nulls().n_unique() < 2:
        raise Untestable(f"{label(param)} does not vary")
    return group_means(df.filter(pl.col(param).is_not_null()), param, metrics)


def pct(e: Est) -> str:
    return e.fmt(".1f", 100.0, "%")


def flat_accuracy(df: pl.DataFrame) -> str | None:
    """Why accuracy cannot separate these trials, or None: every trial's accuracy lies within every other's interval
    (a point they all share)."""
    e = ests(df, "accuracy")
    if len(e) < 2 or not all(x.known for x in e):
        return None
    shared = common_value(e)
    if shared is None:
        return None
    values = sorted(x.value for x in e)
    seen = f"{100 * values[0]:.1f}%" if values[0] == values[-1] else f"{100 * values[0]:.1f}–{100 * values[-1]:.1f}%"
    return (f"every configuration sits at the same accuracy within its interval ({seen}, all {len(e)} intervals "
            f"contain {100 * shared[0]:.1f}–{100 * shared[1]:.1f}%)")


def accuracy_check(text: str, passed: bool | None, flat: str | None) -> Check:
    """A check on accuracy: inconclusive, with the reason, when accuracy cannot separate the trials (unless the
    intervals themselves settle it in the claim's favour)."""
    if flat and passed is not True:
        return Check(f"{text}: inconclusive, {flat}", None)
    return Check(text, passed)


def trend_check(df: pl.DataFrame, param: str, metric: str, sign: int) -> Check:
    """`metric` rises (sign +1) or falls (−1) with `param`: Spearman ρ over the per-value means, its interval from
    redrawing each mean within its interval."""
    m = means_by(df, param, metric)
    rho = spearman_interval(m[param].cast(pl.Float64).to_list(), [row_est(r, metric) for r in m.iter_rows(named=True)])
    word = "rises" if sign > 0 else "falls"
    name = SPEED_NAMES.get(metric, label(metric))
    text = (f"{name} {word} with {label(param)}: Spearman ρ = {rho.fmt('+.2f')} over {len(m)} values "
            f"(needs {'≥ +' if sign > 0 else '≤ −'}{TREND})")
    passed = decide(rho, ">=", TREND) if sign > 0 else decide(rho, "<=", -TREND)
    return accuracy_check(text, passed, flat_accuracy(df)) if metric == "accuracy" else Check(text, passed)


def nearest(values: Sequence[float], target: float) -> float | None:
    values = [v for v in values if v is not None]
    return min(values, key=lambda v: (abs(v - target), v)) if values else None


def est_at(m: pl.DataFrame, param: str, value: Any, metric: str) -> Est:
    return row_est(m.filter(pl.col(param) == value).row(0, named=True), metric)


def best_by(m: pl.DataFrame, param: str, metric: str) -> tuple[Any, Est]:
    """The value of `param` with the highest mean `metric`, and that mean."""
    row = m.sort(metric, descending=True).row(0, named=True)
    return row[param], row_est(row, metric)


def at_least(a: Est, b: Est) -> bool | None:
    """a ≥ b judged on two intervals: True when a's lies wholly at or above b's, False when wholly below."""
    return True if a.lo >= b.hi else False if a.hi < b.lo else None


def hypervolume_est(df: pl.DataFrame, speed: str) -> Est:
    return Est(*hypervolume_interval(df, (0.0, 0.0), ("accuracy", speed)))
