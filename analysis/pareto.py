"""Non-dominated sets, hypervolume and knee for any objectives and directions, with and without noise.

Everything is normalised to lower-is-better first (as Optuna does), so dominance is one rule:
a dominates b iff a <= b in every objective and a < b in at least one. Equal points do not
dominate each other (duplicates are all on the front), ±inf compare as ordinary values, and
rows with a missing/NaN objective are never on the front and dominate nothing — the same set
Optuna's `study.best_trials` returns for COMPLETE trials.

With noise (`noisy_*`), each objective is an interval (its 95% interval, `analysis.intervals`): a dominates b only
when, in every objective, a's whole interval is at least as good as b's whole interval, and strictly better in one:
better on both axes beyond their intervals. Trials whose intervals overlap on an axis are ties there, and neither
dominates the other. With zero-width intervals this is the rule above.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from analysis.intervals import bounds
from analysis.labels import DIRECTIONS, OBJECTIVES
from recdiff.errors import RecdiffError


def _signs(directions: Sequence[str], k: int) -> np.ndarray:
    if len(directions) != k:
        raise RecdiffError(f"{k} objectives but {len(directions)} directions")
    bad = [d for d in directions if d not in ("minimize", "maximize")]
    if bad:
        raise RecdiffError(f"direction must be 'minimize' or 'maximize', got {bad[0]!r}")
    return np.array([-1.0 if d == "maximize" else 1.0 for d in directions])


def to_loss(points: np.ndarray, directions: Sequence[str]) -> np.ndarray:
    """Objective values → lower-is-better values (maximised objectives negated)."""
    points = np.asarray(points, dtype=float)
    if points.ndim == 1:  # one point, or one objective
        points = points[:, None] if len(directions) == 1 else points.reshape(-1, len(directions))
    return points * _signs(directions, points.shape[1])


def pareto_mask(points: np.ndarray, directions: Sequence[str] = DIRECTIONS) -> np.ndarray:
    """Boolean mask of the non-dominated rows of `points` [N, k]."""
    loss = to_loss(points, directions)
    valid = ~np.isnan(loss).any(axis=1)
    mask = np.zeros(len(loss), dtype=bool)
    cand = loss[valid]
    on = np.ones(len(cand), dtype=bool)
    # Chunked all-pairs test keeps memory at chunk × N × k for large studies.
    for start in range(0, len(cand), 512):
        block = cand[start:start + 512, None, :]                       # (b, 1, k)
        le = (cand[None, :, :] <= block).all(axis=2)                   # (b, N): other <= this
        lt = (cand[None, :, :] < block).any(axis=2)                    # (b, N): other < this somewhere
        on[start:start + 512] = ~(le & lt).any(axis=1)
    mask[np.flatnonzero(valid)] = on
    return mask


def dominates(a: Sequence[float], b: Sequence[float], directions: Sequence[str] = DIRECTIONS) -> bool:
    """True iff point a Pareto-dominates point b."""
    la, lb = to_loss(np.array([a]), directions)[0], to_loss(np.array([b]), directions)[0]
    return bool(np.all(la <= lb) and np.any(la < lb))


def _values(df: pl.DataFrame, objectives: Sequence[str]) -> np.ndarray:
    missing = [c for c in objectives if c not in df.columns]
    if missing:
        raise RecdiffError(f"no column {missing[0]!r} (columns: {', '.join(df.columns)})")
    cols = [df[c].cast(pl.Float64).fill_null(float("nan")).to_numpy() for c in objectives]
    return np.column_stack(cols) if cols else np.empty((len(df), 0))


def with_pareto(df: pl.DataFrame, objectives: Sequence[str] = OBJECTIVES,
                directions: Sequence[str] = DIRECTIONS, by: str | Sequence[str] | None = None,
                name: str = "pareto") -> pl.DataFrame:
    """`df` plus a boolean column: on the front of its group (`by`) or of the whole frame.

    Only COMPLETE trials compete when a `state` column exists (as `study.best_trials`)."""
    complete = (df["state"] == "COMPLETE").fill_null(False).to_numpy() if "state" in df.columns \
        else np.ones(len(df), dtype=bool)
    mask = np.zeros(len(df), dtype=bool)
    index = pl.Series("_i", np.arange(len(df)))
    groups = [df.with_columns(index)] if by is None else \
        df.with_columns(index).partition_by(by, maintain_order=True)
    for group in groups:
        idx = group["_i"].to_numpy()
        idx = idx[complete[idx]]
        if len(idx):
            mask[idx] = pareto_mask(_values(df[idx], objectives), directions)
    return df.with_columns(pl.Series(name, mask))


def pareto_front(df: pl.DataFrame, objectives: Sequence[str] = OBJECTIVES,
                 directions: Sequence[str] = DIRECTIONS, by: str | Sequence[str] | None = None) -> pl.DataFrame:
    """Rows on the front (per group with `by`, e.g. one front per β), sorted by the first objective."""
    front = with_pareto(df, objectives, directions, by, name="_pareto").filter(pl.col("_pareto")).drop("_pareto")
    keys = ([by] if isinstance(by, str) else list(by or [])) + [objectives[0]]
    return front.sort(keys, nulls_last=True)


def hypervolume(points: np.ndarray, reference: Sequence[float], directions: Sequence[str] = DIRECTIONS) -> float:
    """Volume dominated by `points` and bounded by `reference` (points not better than it add nothing)."""
    loss = to_loss(points, directions)
    ref = to_loss(np.array([reference], dtype=float), directions)[0]
    loss = loss[~np.isnan(loss).any(axis=1)]
    loss = loss[(loss < ref).all(axis=1)] if len(loss) else loss
    if len(loss) == 0:
        return 0.0
    if loss.shape[1] == 1:
        return float(ref[0] - loss[:, 0].min())
    if loss.shape[1] == 2:
        # Sweep in the first objective; each new minimum of the second adds one rectangle.
        order = np.lexsort((loss[:, 1], loss[:, 0]))
        volume, best = 0.0, ref[1]
        for x, y in loss[order]:
            if y < best:
                volume += (ref[0] - x) * (best - y)
                best = y
        return float(volume)
    from optuna._hypervolume import compute_hypervolume  # WFG for k > 2; private but stable since 3.x
    return float(compute_hypervolume(loss, ref))


def frame_hypervolume(df: pl.DataFrame, reference: Sequence[float], objectives: Sequence[str] = OBJECTIVES,
                      directions: Sequence[str] = DIRECTIONS) -> float:
    """Hypervolume of a trials table's COMPLETE rows."""
    if "state" in df.columns:
        df = df.filter(pl.col("state") == "COMPLETE")
    return hypervolume(_values(df, objectives), reference, directions)


def knee_index(points: np.ndarray, directions: Sequence[str] = DIRECTIONS) -> int | None:
    """Index (into `points`) of the knee of their 2-D front: after scaling each objective to
    [0, 1] over the front, the front point farthest from the line through its two extremes
    (ties, and fronts of < 3 points, go to the point closest to the ideal corner)."""
    points = np.asarray(points, dtype=float)
    mask = pareto_mask(points, directions)
    idx = np.flatnonzero(mask & np.isfinite(points).all(axis=1))
    if len(idx) == 0:
        return None
    loss = to_loss(points[idx], directions)
    lo, hi = loss.min(axis=0), loss.max(axis=0)
    scaled = (loss - lo) / np.where(hi > lo, hi - lo, 1.0)            # 0 = best along each axis
    a, b = scaled[np.argmin(scaled[:, 0])], scaled[np.argmax(scaled[:, 0])]
    span = np.hypot(*(b - a))
    dist = np.abs((b - a)[0] * (a - scaled)[:, 1] - (a - scaled)[:, 0] * (b - a)[1]) / span if span > 0 \
        else np.zeros(len(scaled))
    ideal = np.hypot(scaled[:, 0], scaled[:, 1])
    best = np.lexsort((ideal, -np.round(dist, 12)))[0]
    return int(idx[best])


def knee(df: pl.DataFrame, objectives: Sequence[str] = OBJECTIVES,
         directions: Sequence[str] = DIRECTIONS) -> dict | None:
    """The knee trial of a trials table (as a row dict), or None without a complete trial."""
    if "state" in df.columns:
        df = df.filter(pl.col("state") == "COMPLETE")
    i = knee_index(_values(df, objectives), directions)
    return None if i is None else df.row(i, named=True)


# ------------------------------------------------------------------------------------------- with noise
def _worst_best(lows: np.ndarray, highs: np.ndarray, directions: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per row and objective, in lower-is-better terms: (the worst end of its interval, the best end)."""
    a, b = to_loss(lows, directions), to_loss(highs, directions)
    return np.maximum(a, b), np.minimum(a, b)


def noisy_dominates(a_lo: Sequence[float], a_hi: Sequence[float], b_lo: Sequence[float], b_hi: Sequence[float],
                    directions: Sequence[str] = DIRECTIONS) -> bool:
    """True iff a dominates b beyond their intervals (per objective: the interval's low and high ends)."""
    a_worst, _ = _worst_best(np.array([a_lo], float), np.array([a_hi], float), directions)
    _, b_best = _worst_best(np.array([b_lo], float), np.array([b_hi], float), directions)
    return bool(np.all(a_worst[0] <= b_best[0]) and np.any(a_worst[0] < b_best[0]))


def noisy_pareto_mask(points: np.ndarray, lows: np.ndarray, highs: np.ndarray,
                      directions: Sequence[str] = DIRECTIONS) -> np.ndarray:
    """Rows of `points` [N, k] that no other row dominates beyond the intervals [`lows`, `highs`] (ties stay on)."""
    points = np.asarray(points, dtype=float).reshape(-1, len(directions))
    valid = ~np.isnan(points).any(axis=1)
    worst, best = _worst_best(np.asarray(lows, float).reshape(points.shape),
                              np.asarray(highs, float).reshape(points.shape), directions)
    worst, best = np.where(np.isnan(worst), np.inf, worst), np.where(np.isnan(best), -np.inf, best)
    dominated = np.zeros(len(points), dtype=bool)
    for start in range(0, len(points), 512):   # chunked as pareto_mask
        b = best[start:start + 512, None, :]                               # (b, 1, k)
        le = (worst[None, :, :] <= b).all(axis=2)                          # (b, N): other j's worst <= this best
        lt = (worst[None, :, :] < b).any(axis=2)
        dominated[start:start + 512] = (le & lt & valid[None, :]).any(axis=1)
    return valid & ~dominated


def with_noisy_pareto(df: pl.DataFrame, objectives: Sequence[str] = OBJECTIVES,
                      directions: Sequence[str] = DIRECTIONS, name: str = "pareto") -> pl.DataFrame:
    """`df` plus a boolean column: not dominated beyond the intervals by another COMPLETE row. A row recorded
    without an interval counts as exact (a study from before intervals gets Optuna's front)."""
    complete = (df["state"] == "COMPLETE").fill_null(False).to_numpy() if "state" in df.columns \
        else np.ones(len(df), dtype=bool)
    mask = np.zeros(len(df), dtype=bool)
    idx = np.flatnonzero(complete)
    if len(idx):
        sub = df[idx]
        lows, highs = zip(*(bounds(sub, c) for c in objectives))
        mask[idx] = noisy_pareto_mask(_values(sub, objectives), np.column_stack(lows), np.column_stack(highs),
                                      directions)
    return df.with_columns(pl.Series(name, mask))


def noisy_pareto_front(df: pl.DataFrame, objectives: Sequence[str] = OBJECTIVES,
                       directions: Sequence[str] = DIRECTIONS) -> pl.DataFrame:
    """Rows not dominated beyond their intervals, sorted by the first objective."""
    front = with_noisy_pareto(df, objectives, directions, name="_pareto").filter(pl.col("_pareto")).drop("_pareto")
    return front.sort(objectives[0], nulls_last=True)


def hypervolume_interval(df: pl.DataFrame, reference: Sequence[float], objectives: Sequence[str] = OBJECTIVES,
                         directions: Sequence[str] = DIRECTIONS,
                         missing: str = "unknown") -> tuple[float, float, float]:
    """(hypervolume, low, high) of a table's COMPLETE rows: the volume at the measured values, with every point at
    the worst end of its intervals, and at the best end. Unknown intervals (`missing="unknown"`) give infinite
    bounds."""
    if "state" in df.columns:
        df = df.filter(pl.col("state") == "COMPLETE")
    pts = _values(df, objectives)
    lows, highs = zip(*(bounds(df, c, missing) for c in objectives)) if objectives else ((), ())
    lows, highs = np.column_stack(lows), np.column_stack(highs)
    if not (np.isfinite(lows).all() and np.isfinite(highs).all()):
        return hypervolume(pts, reference, directions), -np.inf, np.inf
    signs = _signs(directions, len(objectives))
    worst = np.where(signs < 0, lows, highs)   # maximised: the low end; minimised: the high end
    best = np.where(signs < 0, highs, lows)
    return (hypervolume(pts, reference, directions), hypervolume(worst, reference, directions),
            hypervolume(best, reference, directions))
