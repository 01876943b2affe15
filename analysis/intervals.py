"""Measured numbers with their 95% intervals, and decisions that only go one way when the interval does.

Trials record an interval next to each measured number: accuracy's Wilson interval (`accuracy_lo/hi`), the
tokens/s objective's and the paired speed-up's bootstrap intervals (`tokens_per_s_lo/hi`, `speedup_lo/hi`,
`recdiff.timing.paired_timing`), named one way: `<column>_lo`, `<column>_hi` (`recdiff.trial.record`; a journal's older
names are mapped as the trials load). Everything here derives intervals of combinations from them:

* sums, means and differences by MOVER (Zou & Donner 2008, "method of variance estimates recovery"; for a
  difference of two proportions it is Newcombe's hybrid score interval): each estimate's distance to its own bounds
  combines in quadrature;
* ratios of positive numbers by MOVER on their logarithms;
* a rank correlation over per-value means by drawing each mean within its interval (seeded, so deterministic).

:func:`decide` is the one rule of the claims: a comparison passes or fails only when the whole interval lies on one
side of the threshold; otherwise it is inconclusive (None). A number recorded without an interval (a study from
before paired timing) has unknown precision: its bounds are infinite and every comparison with it is inconclusive.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

# scipy.stats.norm.ppf(0.975), written out (tested): scipy.stats is imported where it is used, as it costs about 2 s of
# the start of every sweep that prints its closing table
Z95 = 1.959963984540054
SEED = 0
DRAWS = 4000


@dataclass(frozen=True)
class Est:
    """A measured number and its 95% interval (infinite bounds: precision unknown)."""

    value: float
    lo: float
    hi: float

    @classmethod
    def exact(cls, value: float) -> "Est":
        return cls(float(value), float(value), float(value))

    @property
    def known(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    def scaled(self, k: float) -> "Est":
        a, b = self.lo * k, self.hi * k
        return Est(self.value * k, min(a, b), max(a, b))

    def __sub__(self, other: "Est") -> "Est":
        return combine([self, other], [1.0, -1.0])

    def ratio(self, other: "Est") -> "Est":
        """self ÷ other for positive numbers, by MOVER on the logarithms."""
        if min(self.value, self.lo, other.value, other.lo) <= 0:
            return Est(self.value / other.value if other.value > 0 else math.nan, -math.inf, math.inf)
        log = combine([Est(*np.log([self.value, self.lo, self.hi])), Est(*np.log([other.value, other.lo, other.hi]))],
                      [1.0, -1.0])
        return Est(*np.exp([log.value, log.lo, log.hi]).tolist())

    def fmt(self, spec: str = ".3g", scale: float = 1.0, unit: str = "") -> str:
        v = f"{self.value * scale:{spec}}{unit}"
        if not self.known:
            return f"{v} [no interval recorded]"
        return f"{v} [{self.lo * scale:{spec}}, {self.hi * scale:{spec}}]"


def combine(parts: Sequence[Est], weights: Sequence[float]) -> Est:
    """Σ wᵢ·xᵢ with its MOVER interval: the lower bound takes each part's distance to the bound on the side that
    lowers the sum, in quadrature (an exact number adds no width; an unknown one makes the result unknown)."""
    value = sum(w * p.value for w, p in zip(weights, parts))
    down = [(w * (p.value - p.lo)) if w >= 0 else (-w * (p.hi - p.value)) for w, p in zip(weights, parts)]
    up = [(w * (p.hi - p.value)) if w >= 0 else (-w * (p.value - p.lo)) for w, p in zip(weights, parts)]
    if not all(math.isfinite(d) for d in down + up):
        return Est(value, -math.inf, math.inf)
    return Est(value, value - math.sqrt(sum(d * d for d in down)), value + math.sqrt(sum(u * u for u in up)))


def mean(parts: Sequence[Est]) -> Est:
    """Mean of independent estimates (repeats of one setting, the settings of one parameter value)."""
    return combine(parts, [1.0 / len(parts)] * len(parts))


def ests(df: pl.DataFrame, column: str, missing: str = "unknown") -> list[Est]:
    """One Est per row of `column` from its interval columns. `missing`: "unknown" (infinite bounds: the claims) or
    "point" (zero width: a front of a study recorded before intervals is Optuna's front)."""
    lo_col, hi_col = interval_columns(column)
    values = df[column].cast(pl.Float64).to_list()
    lows = df[lo_col].cast(pl.Float64).to_list() if lo_col in df.columns else [None] * len(values)
    highs = df[hi_col].cast(pl.Float64).to_list() if hi_col in df.columns else [None] * len(values)
    out = []
    for v, lo, hi in zip(values, lows, highs):
        if v is None or math.isnan(v):   # not measured (an unpaired speed-up): nothing to compare
            out.append(Est(math.nan, -math.inf, math.inf))
            continue
        if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
            lo, hi = (v, v) if missing == "point" else (-math.inf, math.inf)
        out.append(Est(v, min(lo, v), max(hi, v)))
    return out


def bounds(df: pl.DataFrame, column: str, missing: str = "point") -> tuple[np.ndarray, np.ndarray]:
    """(lows, highs) of `column` as arrays (see :func:`ests` for `missing`)."""
    e = ests(df, column, missing)
    return np.array([x.lo for x in e], dtype=float), np.array([x.hi for x in e], dtype=float)


def interval_columns(column: str) -> tuple[str, str]:
    """The names of `column`'s interval columns, as the trials record them: `<column>_lo`, `<column>_hi`."""
    return f"{column}_lo", f"{column}_hi"


def group_means(df: pl.DataFrame, by: str | Sequence[str], metrics: Sequence[str]) -> pl.DataFrame:
    """Per value of `by`: each metric's mean over the rows (repeats, the other parameters) with its MOVER interval
    in the metric's interval columns (:func:`interval_columns`; null when a row has none), sorted by `by`."""
    keys = [by] if isinstance(by, str) else list(by)
    cols = []
    for m in metrics:
        lo_col, hi_col = interval_columns(m)
        v = pl.col(m).cast(pl.Float64)
        lo = pl.col(lo_col).cast(pl.Float64) if lo_col in df.columns else pl.lit(None, pl.Float64)
        hi = pl.col(hi_col).cast(pl.Float64) if hi_col in df.columns else pl.lit(None, pl.Float64)
        known = lo.is_not_null().all() & hi.is_not_null().all()
        cols += [v.mean().alias(m),
                 pl.when(known).then(v.mean() - (v - lo).pow(2).sum().sqrt() / pl.len()).alias(lo_col),
                 pl.when(known).then(v.mean() + (hi - v).pow(2).sum().sqrt() / pl.len()).alias(hi_col)]
    return df.group_by(keys).agg(cols).sort(keys)


def row_est(row: dict, metric: str) -> Est:
    """The Est of `metric` in a row of :func:`group_means`."""
    lo_col, hi_col = interval_columns(metric)
    lo, hi = row.get(lo_col), row.get(hi_col)
    if lo is None or hi is None:
        return Est(float(row[metric]), -math.inf, math.inf)
    return Est(float(row[metric]), float(lo), float(hi))


def decide(est: Est, op: str, threshold: float) -> bool | None:
    """Does `est op threshold` hold? True/False only when the whole interval says so, else None (inconclusive).
    With a zero-width interval it is the plain comparison."""
    lo, hi = est.lo, est.hi
    if op == ">=":
        return True if lo >= threshold else False if hi < threshold else None
    if op == ">":
        return True if lo > threshold else False if hi <= threshold else None
    if op == "<=":
        return True if hi <= threshold else False if lo > threshold else None
    if op == "<":
        return True if hi < threshold else False if lo >= threshold else None
    raise ValueError(f"unknown comparison {op!r}")


def all_of(outcomes: Sequence[bool | None]) -> bool | None:
    """Three-valued AND: False if any is False, True if all are True, else None."""
    return False if any(o is False for o in outcomes) else True if all(o is True for o in outcomes) else None


def common_value(parts: Sequence[Est]) -> tuple[float, float] | None:
    """The range every interval contains, (max of lows, min of highs), or None when two intervals are apart."""
    lo, hi = max(p.lo for p in parts), min(p.hi for p in parts)
    return (lo, hi) if lo <= hi else None


def wilson(k: int, n: int) -> Est:
    """A proportion k/n with its 95% Wilson score interval: the one the trials record for their accuracy
    (:func:`recdiff.benchmarks.stats.wilson_interval`, scipy's)."""
    if n == 0:
        return Est(math.nan, -math.inf, math.inf)
    from recdiff.benchmarks.stats import wilson_interval

    low, high = wilson_interval(int(k), int(n))
    return Est(k / n, min(low, k / n), max(high, k / n))


def t_mean(values: Sequence[float]) -> Est:
    """Mean of `values` with its Student-t 95% interval (unknown with a single value)."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    m = float(x.mean())
    if len(x) < 2:
        return Est(m, -math.inf, math.inf)
    sem = float(stats.sem(x))
    if sem == 0:
        return Est.exact(m)
    lo, hi = stats.t.interval(0.95, len(x) - 1, loc=m, scale=sem)
    return Est(m, float(lo), float(hi))


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's ρ (average ranks for ties); 0 when either side is constant."""
    from scipy import stats

    xr, yr = stats.rankdata(x), stats.rankdata(y)
    if np.std(xr) == 0 or np.std(yr) == 0:
        return 0.0
    return float(np.corrcoef(xr, yr)[0, 1])


def spearman_interval(x: Sequence[float], y: Sequence[Est], seed: int = SEED, draws: int = DRAWS) -> Est:
    """Spearman ρ between `x` and the estimates `y`, with a 95% interval from redrawing each estimate within its
    interval (normal on each side of the value, scaled so the 95% interval matches; seeded): how far the ranking
    could move within the measurements' precision."""
    rho = spearman(x, [e.value for e in y])
    if not all(e.known for e in y):
        return Est(rho, -math.inf, math.inf)
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((draws, len(y)))
    v = np.array([e.value for e in y])
    down = np.array([e.value - e.lo for e in y]) / Z95
    up = np.array([e.hi - e.value for e in y]) / Z95
    drawn = v + np.where(z < 0, z * down, z * up)
    from scipy import stats

    xr = stats.rankdata(x)
    yr = stats.rankdata(drawn, axis=1)
    xc = xr - xr.mean()
    yc = yr - yr.mean(axis=1, keepdims=True)
    denom = np.sqrt((xc ** 2).sum() * (yc ** 2).sum(axis=1))
    rhos = np.divide(yc @ xc, denom, out=np.zeros(draws), where=denom > 0)
    lo, hi = np.percentile(rhos, [2.5, 97.5])
    return Est(rho, min(float(lo), rho), max(float(hi), rho))


def fisher_interval(rho: float, n: int) -> Est:
    """95% interval of a Spearman ρ over `n` pairs by Fisher's z with Fieller's variance 1.06 / (n − 3)."""
    if n <= 3:
        return Est(rho, -1.0, 1.0)
    z = math.atanh(max(min(rho, 1 - 1e-12), -1 + 1e-12))
    half = Z95 * math.sqrt(1.06 / (n - 3))
    return Est(rho, min(math.tanh(z - half), rho), max(math.tanh(z + half), rho))


def speed_column(df: pl.DataFrame) -> str:
    """The speed to compare trials by: the paired `speedup` when every row has one (each trial timed against the
    reference in its own rounds, so a load that came and went between trials cancels), else `tokens_per_s`."""
    if "speedup" in df.columns and df.height and df["speedup"].null_count() == 0:
        return "speedup"
    return "tokens_per_s"
