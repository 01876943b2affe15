"""The paper's claim for each figure, and whether a study's data agrees with it.

Every verdict is computed from the trials (and their traces): a claim is one or more *checks*, each a number from
the data, with its 95% interval, compared with what the paper reports, e.g. "accuracy rises with r′" is a Spearman
rank correlation of at least +0.5 between r′ and the mean accuracy per r′. A check passes or fails only when its
whole interval lies on one side of the threshold (`analysis.intervals.decide`); otherwise it is **inconclusive**, and
its evidence states the interval. A claim **agrees** when every check passes, **disagrees** when one fails, is
**inconclusive** otherwise, and is **n/a** when the data cannot test it (a parameter that never varies, no traces).
The thresholds are the paper's own words made numeric and sit next to each check.

Speeds are compared by the paired speed-up (each trial timed against the reference in its own rounds, so a load
that came and went between trials cancels) when every trial has one, else by tokens/s; a number recorded without an
interval has unknown precision and leaves its checks inconclusive. An accuracy check where every configuration sits
at the same accuracy within its interval (the embedded model answers everything at every r′ and ε) is inconclusive
for that reason, whatever the point values say.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from analysis.intervals import (Est, all_of, common_value, decide, ests, fisher_interval, group_means, mean, row_est,
                                spearman, spearman_interval, speed_column, t_mean, wilson)
from analysis.labels import label, setting
from analysis.load import load_trace
from analysis.pareto import hypervolume_interval, noisy_dominates, noisy_pareto_front
from analysis.plots import split_baselines
from analysis.tables import (delta_accuracy, is_paper_reference, reference_label, reference_trials, speedup_est,
                             speedup_table)
from analysis.trace_plots import position_stats

TREND = 0.5        # |Spearman ρ| a "rises"/"falls with" claim needs
NOISE_BETA = 0.2   # the paper's "moderate noise"
STATUSES = ("agrees", "disagrees", "inconclusive", "n/a")
_MARK = {True: "✓", False: "✗", None: "?"}
SPEED_NAMES = {"speedup": "paired speed-up", "tokens_per_s": "tokens/s"}


@dataclass(frozen=True)
class Check:
    text: str              # what was measured, with the numbers and their intervals
    passed: bool | None    # None: inconclusive, the interval straddles the threshold


@dataclass
class Verdict:
    checks: list[Check] = field(default_factory=list)
    reason: str | None = None  # why the data cannot test the claim (status n/a)

    @property
    def status(self) -> str:
        if not self.checks:
            return "n/a"
        outcome = all_of([c.passed for c in self.checks])
        return "agrees" if outcome is True else "disagrees" if outcome is False else "inconclusive"

    @property
    def evidence(self) -> str:
        if not self.checks:
            return self.reason or "not testable on this data"
        return "; ".join(f"{c.text} {_MARK[c.passed]}" for c in self.checks)

    @property
    def disagreement(self) -> float:
        """Share of failed checks (0 agrees … 1 every check fails); n/a and inconclusive checks count as 0."""
        return sum(c.passed is False for c in self.checks) / len(self.checks) if self.checks else 0.0


def count_outcomes(verdicts: Sequence[Verdict]) -> dict[str, int]:
    """How many verdicts have each status, in `STATUSES` order."""
    return {s: sum(v.status == s for v in verdicts) for s in STATUSES}


Judge = Callable[[pl.DataFrame], Verdict]


@dataclass(frozen=True)
class Claim:
    figure: str            # file stem written by `analysis report` for the recipe's study
    recipe: str            # sweeps/<recipe>.yaml
    paper: str             # where the paper shows it
    text: str              # the paper's claim, one sentence
    judge: Judge


# ------------------------------------------------------------------------------------------------ helpers
class Untestable(Exception):
    """The data cannot test this claim (the message says why)."""


def _done(df: pl.DataFrame) -> pl.DataFrame:
    return df.filter(pl.col("state") == "COMPLETE") if "state" in df.columns else df


def _diffusion(df: pl.DataFrame) -> pl.DataFrame:
    done = _done(df)
    return split_baselines(done.filter(pl.col("accuracy").is_not_null() & pl.col("tokens_per_s").is_not_null()))[0]


def _means(df: pl.DataFrame, param: str, *metrics: str) -> pl.DataFrame:
    """Mean of each metric per value of `param` (other keys averaged over) with its interval, sorted by `param`."""
    if param not in df.columns or df[param].drop_nulls().n_unique() < 2:
        raise Untestable(f"{label(param)} does not vary")
    return group_means(df.filter(pl.col(param).is_not_null()), param, metrics)


def _pct(e: Est) -> str:
    return e.fmt(".1f", 100.0, "%")


def _flat_accuracy(df: pl.DataFrame) -> str | None:
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


def _accuracy_check(text: str, passed: bool | None, flat: str | None) -> Check:
    """A check on accuracy: inconclusive, with the reason, when accuracy cannot separate the trials (unless the
    intervals themselves settle it in the claim's favour)."""
    if flat and passed is not True:
        return Check(f"{text}: inconclusive, {flat}", None)
    return Check(text, passed)


def _trend(df: pl.DataFrame, param: str, metric: str, sign: int) -> Check:
    """`metric` rises (sign +1) or falls (−1) with `param`: Spearman ρ over the per-value means, its interval from
    redrawing each mean within its interval."""
    m = _means(df, param, metric)
    rho = spearman_interval(m[param].cast(pl.Float64).to_list(), [row_est(r, metric) for r in m.iter_rows(named=True)])
    word = "rises" if sign > 0 else "falls"
    name = SPEED_NAMES.get(metric, label(metric))
    text = (f"{name} {word} with {label(param)}: Spearman ρ = {rho.fmt('+.2f')} over {len(m)} values "
            f"(needs {'≥ +' if sign > 0 else '≤ −'}{TREND})")
    passed = decide(rho, ">=", TREND) if sign > 0 else decide(rho, "<=", -TREND)
    return _accuracy_check(text, passed, _flat_accuracy(df)) if metric == "accuracy" else Check(text, passed)


def _near(values: Sequence[float], target: float) -> float | None:
    values = [v for v in values if v is not None]
    return min(values, key=lambda v: (abs(v - target), v)) if values else None


def _at(m: pl.DataFrame, param: str, value: Any, metric: str) -> Est:
    return row_est(m.filter(pl.col(param) == value).row(0, named=True), metric)


def _best(m: pl.DataFrame, param: str, metric: str) -> tuple[Any, Est]:
    """The value of `param` with the highest mean `metric`, and that mean."""
    row = m.sort(metric, descending=True).row(0, named=True)
    return row[param], row_est(row, metric)


def _apart(a: Est, b: Est) -> bool | None:
    """a ≥ b judged on two intervals: True when a's lies wholly at or above b's, False when wholly below."""
    return True if a.lo >= b.hi else False if a.hi < b.lo else None


def _hypervolume(df: pl.DataFrame, speed: str) -> Est:
    return Est(*hypervolume_interval(df, (0.0, 0.0), ("accuracy", speed)))


def _judged(fn: Callable[[pl.DataFrame], list[Check]]) -> Judge:
    def judge(df: pl.DataFrame) -> Verdict:
        try:
            return Verdict(fn(df))
        except Untestable as exc:
            return Verdict(reason=str(exc))
    judge.__name__ = judge.__qualname__ = fn.__name__
    judge.__doc__ = fn.__doc__
    return judge


# ------------------------------------------------------------------------------------------------ judges
@_judged
def noise_dominates(df: pl.DataFrame) -> list[Check]:
    """fig:pareto — moderate noise dominates none; the fastest front point loses at most 2 points."""
    diff = _diffusion(df)
    if "beta" not in diff.columns or diff["beta"].drop_nulls().n_unique() < 2:
        raise Untestable(f"{label('beta')} does not vary")
    moderate = _near([b for b in diff["beta"].unique().to_list() if b and b > 0], NOISE_BETA)
    none = diff.filter(pl.col("beta") == 0.0)
    if moderate is None or none.is_empty():
        raise Untestable(f"needs trials at {label('beta')} = 0 and > 0")
    speed = speed_column(diff)
    some = diff.filter(pl.col("beta") == moderate)
    hv_some, hv_none = _hypervolume(some, speed), _hypervolume(none, speed)
    checks = [Check(f"hypervolume (accuracy × {SPEED_NAMES[speed]}) of the {setting('beta', moderate)} trials "
                    f"{hv_some.fmt()} vs {setting('beta', 0.0)} {hv_none.fmt()} (needs ≥, intervals apart)",
                    _apart(hv_some, hv_none))]
    fastest = noisy_pareto_front(diff, ("accuracy", speed)).sort(speed).tail(1)
    ref = reference_trials(_done(df))
    if not ref.is_empty():
        base, what = mean(ests(ref, "accuracy")), reference_label(ref)
        pool = pl.concat([diff, ref], how="diagonal_relaxed")
    else:
        base, what, pool = ests(diff.sort("accuracy").tail(1), "accuracy")[0], "the best diffusion trial", diff
    fastest_acc, fastest = ests(fastest, "accuracy")[0], fastest.row(0, named=True)
    loss = delta_accuracy(base, fastest_acc)
    checks.append(_accuracy_check(f"fastest front point ({SPEED_NAMES[speed]} {fastest[speed]:.3g}) loses "
                                  f"{loss.fmt('+.1f')} points against {what} (needs ≤ 2)",
                                  decide(loss, "<=", 2.0), _flat_accuracy(pool)))
    return checks


@_judged
def noise_per_r_inner(df: pl.DataFrame) -> list[Check]:
    """fig:tradeoff — at a given r′, moderate noise is not dominated by no noise."""
    diff = _diffusion(df)
    if not {"beta", "r_inner"} <= set(diff.columns) or diff["beta"].drop_nulls().n_unique() < 2:
        raise Untestable(f"{label('beta')} does not vary")
    moderate = _near([b for b in diff["beta"].unique().to_list() if b and b > 0], NOISE_BETA)
    speed = speed_column(diff)
    m = group_means(diff.filter(pl.col("beta").is_in([0.0, moderate])), ["r_inner", "beta"], ["accuracy", speed])
    clear = dominated = tied = 0
    ties = []
    for r in sorted(m["r_inner"].drop_nulls().unique().to_list()):
        a, b = (m.filter((pl.col("r_inner") == r) & (pl.col("beta") == beta)) for beta in (moderate, 0.0))
        if a.is_empty() or b.is_empty():
            continue
        ea = [row_est(a.row(0, named=True), k) for k in ("accuracy", speed)]
        eb = [row_est(b.row(0, named=True), k) for k in ("accuracy", speed)]
        if noisy_dominates([e.lo for e in eb], [e.hi for e in eb], [e.lo for e in ea], [e.hi for e in ea]):
            dominated += 1
        elif any(x.lo > y.hi for x, y in zip(ea, eb)):   # better beyond the intervals on one axis: on the front
            clear += 1
        else:
            tied += 1
            ties.append(f"{setting('r_inner', r)}: {_pct(ea[0])} at {ea[1].fmt()} vs {_pct(eb[0])} at {eb[1].fmt()}")
    total = clear + dominated + tied
    if not total:
        raise Untestable(f"no r′ with trials at both {label('beta')} = 0 and {moderate}")
    passed = True if 2 * clear >= total else False if 2 * dominated > total else None
    return [Check(f"{setting('beta', moderate)} is undominated by {setting('beta', 0.0)} beyond the 95% intervals at "
                  f"{clear} of {total} {label('r_inner')} values, dominated at {dominated}, tied within the intervals "
                  f"at {tied}{' (' + ', '.join(ties) + ')' if ties else ''} (needs undominated at least half)", passed)]


@_judged
def r_inner_trade(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps1 left, fig:heatmap — accuracy rises, throughput falls with r′."""
    diff = _diffusion(df)
    return [_trend(diff, "r_inner", "accuracy", +1), _trend(diff, "r_inner", speed_column(diff), -1)]


@_judged
def epsilon_trade(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps1 right — a larger ε: more tokens/s, less accuracy."""
    diff = _diffusion(df)
    return [_trend(diff, "epsilon", speed_column(diff), +1), _trend(diff, "epsilon", "accuracy", -1)]


@_judged
def small_momentum(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps3 left — small but non-zero η is best (small: 0 < η ≤ 0.3)."""
    diff = _diffusion(df)
    m = _means(diff, "eta", "accuracy")
    small = m.filter((pl.col("eta") > 0) & (pl.col("eta") <= 0.3))
    large = m.filter(pl.col("eta") > 0.3)
    if 0.0 not in m["eta"].to_list() or small.is_empty():
        raise Untestable(f"needs {label('eta')} = 0 and a value in (0, 0.3]")
    flat = _flat_accuracy(diff)
    eta_best, best_small = _best(small, "eta", "accuracy")
    zero = _at(m, "eta", 0.0, "accuracy")
    gain = delta_accuracy(best_small, zero)
    checks = [_accuracy_check(f"best small {setting('eta', eta_best)}: {_pct(best_small)} vs {setting('eta', 0.0)}: "
                              f"{_pct(zero)}, {gain.fmt('+.1f')} points (needs > 0)", decide(gain, ">", 0.0), flat)]
    if not large.is_empty():
        eta_large, best_large = _best(large, "eta", "accuracy")
        over = delta_accuracy(best_large, best_small)
        checks.append(_accuracy_check(f"best {label('eta')} > 0.3 ({setting('eta', eta_large)}): {_pct(best_large)}, "
                                      f"{over.fmt('+.1f')} points against the best small (needs ≤ 0)",
                                      decide(over, "<=", 0.0), flat))
    return checks


@_judged
def no_noise_at_r4(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps3 right — at r′ = 4, with noise scheduled linearly, β_t = 0 is best."""
    diff = _diffusion(df)
    if "r_inner" in diff.columns and (diff["r_inner"] == 4).any():
        diff = diff.filter(pl.col("r_inner") == 4)
    if "beta_schedule" in diff.columns and (diff["beta_schedule"] == "linear").any():
        diff = diff.filter(pl.col("beta_schedule") == "linear")
    m = _means(diff, "beta", "accuracy")
    if 0.0 not in m["beta"].to_list():
        raise Untestable(f"no trial at {label('beta')} = 0")
    zero = _at(m, "beta", 0.0, "accuracy")
    at, best = _best(m.filter(pl.col("beta") > 0), "beta", "accuracy")
    lead = delta_accuracy(zero, best)
    return [_accuracy_check(f"{setting('beta', 0.0)}: {_pct(zero)} vs best noisy {setting('beta', at)}: {_pct(best)}, "
                            f"{lead.fmt('+.1f')} points (needs ≥ 0)", decide(lead, ">=", 0.0), _flat_accuracy(diff))]


def _saturation(w: list[Any], v: list[Est]) -> tuple[Any, Any]:
    """The range of W at which the speed can first come within 5% of its maximum, given the intervals: earliest
    when that W sits at its high end and the maximum at its low end, latest the other way round (no later than the
    last W that can be the maximum itself). Zero-width intervals give one W."""
    top_lo, top_hi = max(e.lo for e in v), max(e.hi for e in v)
    earliest = next(x for x, e in zip(w, v) if e.hi >= 0.95 * top_lo)
    surely = next((x for x, e in zip(w, v) if e.lo >= 0.95 * top_hi), None)
    can_be_top = [x for x, e in zip(w, v) if e.hi >= top_lo][-1]
    return earliest, can_be_top if surely is None else min(surely, can_be_top)


@_judged
def wavefront_growth(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps5 left — tokens/s grows with W up to about 64–128."""
    diff = _diffusion(df)
    speed = speed_column(diff)
    m = _means(diff, "wavefront", speed)
    w, v = m["wavefront"].to_list(), [row_est(r, speed) for r in m.iter_rows(named=True)]
    top = max(e.value for e in v)
    first, last = _saturation(w, v)
    known = all(e.known for e in v)
    at = f"W = {first}" if first == last else \
        f"W in [{first}, {last}] {'within the intervals' if known else '(no interval recorded)'}"
    passed = True if 64 <= first and last <= 128 else False if last < 64 or first > 128 else None
    checks = [Check(f"{SPEED_NAMES[speed]} first within 5% of its maximum ({top:.3g}) at {at} (needs 64–128)", passed)]
    mid = [(x, e) for x, e in zip(w, v) if 64 <= x <= 128]
    if mid:
        x, e = max(mid, key=lambda p: p[1].value)
        gain = e.ratio(v[0])
        checks.append(Check(f"W = {x} reaches {gain.fmt('.2f', unit='x')} the {SPEED_NAMES[speed]} at W = {w[0]} "
                            "(needs ≥ 1.05x)", decide(gain, ">=", 1.05)))
    return checks


@_judged
def headway_no_gain(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps5 right — a headway above 1 gives no practical speed-up (≤ 10%)."""
    diff = _diffusion(df)
    speed = speed_column(diff)
    m = _means(diff, "headway", speed)
    if 1 not in m["headway"].to_list():
        raise Untestable("no trial at headway = 1")
    one = _at(m, "headway", 1, speed)
    at, best = _best(m.filter(pl.col("headway") > 1), "headway", speed)
    gain = best.ratio(one)
    return [Check(f"best headway > 1 (headway={at}) runs {gain.fmt('.2f', unit='x')} headway=1's {SPEED_NAMES[speed]} "
                  "(needs ≤ 1.10x)", decide(gain, "<=", 1.10))]


def _spread(v: list[Est], scale: float, unit: str, need: float) -> Check:
    """The spread (max − min) of the values, divided by `scale`, at most `need`: it passes when even the widest
    spread the intervals allow stays within, fails when even the narrowest exceeds it."""
    values = [e.value for e in v]
    spread = (max(values) - min(values)) / scale
    if not all(e.known for e in v):
        return Check(f"{spread:.1f}{unit} (no interval recorded) (needs ≤ {need:g}{unit})", None)
    least = max(0.0, max(e.lo for e in v) - min(e.hi for e in v)) / scale
    most = (max(e.hi for e in v) - min(e.lo for e in v)) / scale
    return Check(f"{spread:.1f}{unit}, [{least:.1f}, {most:.1f}]{unit} within the intervals (needs ≤ {need:g}{unit})",
                 True if most <= need else False if least > need else None)


@_judged
def minor_effect_init_scale(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps2 left — α has a minor effect: accuracy within 2 points, tokens/s within 10%."""
    diff = _diffusion(df)
    speed = speed_column(diff)
    m = _means(diff, "init_scale", "accuracy", speed)
    rows = list(m.iter_rows(named=True))
    acc = _spread([row_est(r, "accuracy") for r in rows], 0.01, " points", 2.0)
    checks = [_accuracy_check(f"accuracy spread over {label('init_scale')}: {acc.text}", acc.passed,
                              _flat_accuracy(diff))]
    sp = [row_est(r, speed) for r in rows]
    rel = _spread(sp, float(np.median([e.value for e in sp])) / 100.0, "% of the median", 10.0)
    checks.append(Check(f"{SPEED_NAMES[speed]} spread: {rel.text}", rel.passed))
    return checks


@_judged
def continuous_compute_worse(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps2 right — continuous compute is less effective than fresh states."""
    diff = _diffusion(df)
    if "continuous_compute" not in diff.columns or diff["continuous_compute"].drop_nulls().n_unique() < 2:
        raise Untestable(f"{label('continuous_compute')} does not vary")
    speed = speed_column(diff)
    on, off = (diff.filter(pl.col("continuous_compute") == v) for v in (True, False))
    hv_on, hv_off = _hypervolume(on, speed), _hypervolume(off, speed)
    checks = [Check(f"hypervolume (accuracy × {SPEED_NAMES[speed]}) without {hv_off.fmt()} vs with {hv_on.fmt()} "
                    "(needs ≥, intervals apart)", _apart(hv_off, hv_on))]
    if "r_inner" in diff.columns:
        m = group_means(diff.filter(pl.col("r_inner").is_not_null()), ["r_inner", "continuous_compute"], ["accuracy"])
        worse = better = total = 0
        for r in m["r_inner"].unique().sort().to_list():
            pair = {row["continuous_compute"]: row_est(row, "accuracy")
                    for row in m.filter(pl.col("r_inner") == r).iter_rows(named=True)}
            if True not in pair or False not in pair:
                continue
            total += 1
            gap = pair[True] - pair[False]
            worse += decide(gap, "<=", 0.0) is True
            better += decide(gap, "<=", 0.0) is False
        if total:
            passed = True if 2 * worse >= total else False if 2 * better > total else None
            checks.append(_accuracy_check(
                f"accuracy with it ≤ without beyond the 95% intervals at {worse} of {total} {label('r_inner')} values, "
                f"above at {better} (needs at least half)", passed, _flat_accuracy(diff)))
    return checks


@_judged
def kv_sharing_free(df: pl.DataFrame) -> list[Check]:
    """fig:cache_sharing — sharing matches per-step caches in accuracy (within 1 point) and its memory does not grow
    with r, while per-step caches do."""
    done = _done(df)
    if "kv_cache" not in done.columns:
        raise Untestable("no kv_cache setting")
    st = done.filter((pl.col("sampler") == "static") & pl.col("kv_cache").is_not_null())
    m = st.group_by("r", "kv_cache").agg(pl.col("kv_cache_bytes").mean())
    mem = m.pivot(on="kv_cache", index="r", values="kv_cache_bytes").sort("r")
    if not {"shared", "per_step"} <= set(mem.columns):
        raise Untestable("needs static AR with kv_cache = shared and per_step")
    acc = group_means(st, ["r", "kv_cache"], ["accuracy"])
    gaps = []
    for r in acc["r"].unique().sort().to_list():
        pair = {row["kv_cache"]: row_est(row, "accuracy") for row in acc.filter(pl.col("r") == r).iter_rows(named=True)}
        if {"shared", "per_step"} <= set(pair):
            gaps.append((pair["shared"] - pair["per_step"]).scaled(100.0))
    if not gaps:
        raise Untestable("no r with both KV-cache modes")
    mem = mem.drop_nulls()
    largest = max(gaps, key=lambda g: abs(g.value))
    reach = max(max(abs(g.lo), abs(g.hi)) for g in gaps)
    passed = all_of([True if -1.0 <= g.lo and g.hi <= 1.0 else False if g.lo > 1.0 or g.hi < -1.0 else None
                     for g in gaps])
    # "r times less memory": sharing makes the KV memory independent of r, while a cache per recurrence grows with
    # it (by r for the core block's layers; prelude and coda keep one K/V per position either way). Bytes are
    # counted, not measured: exact.
    shared = st.filter(pl.col("kv_cache") == "shared")["kv_cache_bytes"].drop_nulls()
    flat = float(shared.max() / shared.min()) if shared.len() else float("inf")
    rho = spearman(mem["r"].cast(pl.Float64).to_list(), (mem["per_step"] / mem["shared"]).to_list()) \
        if mem.height > 1 else 0.0
    top = mem.row(-1, named=True) if mem.height else None
    grows = f" to {top['per_step'] / top['shared']:.1f}x at r={top['r']}" if top else ""
    return [_accuracy_check(f"largest accuracy gap shared vs per-step over {len(gaps)} r values: {largest.fmt('+.1f')} "
                            f"points, the 95% intervals reach {reach:.1f} (needs within ±1)", passed, _flat_accuracy(st)),
            Check(f"shared KV memory varies {100 * (flat - 1):.0f}% over r (needs ≤ 5%); per-step ÷ shared grows with "
                  f"r (ρ = {rho:+.2f}, needs ≥ +{TREND}){grows}", flat <= 1.05 and rho >= TREND)]


def _traces(df: pl.DataFrame) -> list[tuple[dict, str]]:
    from pathlib import Path

    out = []
    for row in _done(df).iter_rows(named=True):
        for p in row.get("trace_paths") or []:
            if p and Path(p).is_file():
                out.append((row, p))
    if not out:
        raise Untestable("no diffusion traces")
    return out


@_judged
def tokens_settle(df: pl.DataFrame) -> list[Check]:
    """fig:token_stability — candidates change in early steps (≥ 10% of positions change at least once) and settle
    before they are frozen (≥ 90% of those freeze at least a step after their last change)."""
    changed = settled = total = 0
    for _, path in _traces(df):
        t = load_trace(path)
        tokens = t["tokens"]
        stats = position_stats(t).filter(pl.col("frozen_step").is_not_null())
        for pos, first, froze in stats.select("position", "first_step", "frozen_step").iter_rows():
            total += 1
            col = tokens[first:froze + 1, pos]
            changes = np.flatnonzero(col[1:] != col[:-1]) + 1   # steps (from first) at which the token changed
            if changes.size:
                changed += 1
                settled += changes[-1] < froze - first        # unchanged in the step it froze
    if not total:
        raise Untestable("no frozen positions in the traces")
    change, settle = wilson(changed, total), wilson(settled, changed)
    checks = [Check(f"{_pct(change)} of {total} positions change their token in the wavefront (needs ≥ 10%)",
                    decide(change, ">=", 0.10))]
    if changed:
        checks.append(Check(f"{_pct(settle)} of those {changed} were unchanged in the step they froze (needs ≥ 90%)",
                            decide(settle, ">=", 0.90)))
    return checks


@_judged
def delta_shrinks(df: pl.DataFrame) -> list[Check]:
    """Sec. 4 (latent freezing) — a position's latent change δ shrinks the longer it stays in the wavefront."""
    ages, deltas = [], []
    for _, path in _traces(df):
        t = load_trace(path)
        if t["delta"] is None:
            continue
        written = t["tokens"] >= 0
        first = np.where(written.any(axis=0), written.argmax(axis=0), -1)
        steps, positions = np.nonzero(np.isfinite(t["delta"]))
        keep = (positions >= t["prompt_len"]) & (first[positions] >= 0)
        ages += (steps[keep] - first[positions[keep]]).tolist()
        deltas += t["delta"][steps[keep], positions[keep]].tolist()
    if not ages:
        raise Untestable("no latent changes recorded in the traces")
    m = pl.DataFrame({"age": ages, "delta": deltas}).group_by("age").agg(pl.col("delta").median()).sort("age")
    m = m.filter(pl.col("age") <= m["age"].quantile(0.9))   # the oldest ages hold a handful of positions
    rho = fisher_interval(spearman(m["age"].to_list(), m["delta"].to_list()), m.height)
    return [Check(f"median δ vs steps in the wavefront: Spearman ρ = {rho.fmt('+.2f')} over {m.height} ages "
                  f"(needs ≤ −{TREND})", decide(rho, "<=", -TREND))]


@_judged
def small_r_inner_stalls(df: pl.DataFrame) -> list[Check]:
    """fig:qualitative_examples — r′ = 4 freezes tokens quickly; smaller r′ needs more sampler steps per token."""
    per: dict[int, list[float]] = {}
    for row, path in _traces(df):
        t = load_trace(path)
        generated = t["tokens"].shape[1] - t["prompt_len"]
        if generated > 0 and row.get("r_inner") is not None:
            per.setdefault(int(row["r_inner"]), []).append(t["tokens"].shape[0] / generated)
    if len(per) < 2:
        raise Untestable(f"{label('r_inner')} does not vary")
    if 4 not in per or not any(r < 4 for r in per):
        raise Untestable("needs traces at r′ = 4 and r′ < 4")
    four = t_mean(per[4])
    small = {r: t_mean(v) for r, v in sorted(per.items()) if r < 4}
    return [Check(f"sampler steps per token (mean over traces): {four.fmt('.2f')} at r′=4 ({len(per[4])} traces) vs "
                  + ", ".join(f"{e.fmt('.2f')} at r′={r} ({len(per[r])})" for r, e in small.items())
                  + " (needs more below 4)", all_of([decide(e - four, ">", 0.0) for e in small.values()]))]


@_judged
def diffusion_speedup(df: pl.DataFrame) -> list[Check]:
    """tab:sampler_comparison — diffusion is 4–5× static AR (r=32) within about 1 point of accuracy."""
    if not is_paper_reference(_done(df)):
        raise Untestable(f"needs speed-ups against static AR (r=32); the study timed against {reference_label(df)}")
    table = speedup_table(df)
    diff = table.filter((pl.col("sampler") == "diffusion") & pl.col("delta_accuracy").is_not_null())
    if diff.is_empty():
        raise Untestable("needs diffusion trials and static AR at r=32")
    paired = diff.filter(pl.col("paired"))
    if paired.is_empty():
        best = diff.sort("tokens_per_s").row(-1, named=True)
        speed = Check(f"fastest diffusion row ({best['setting'] or 'defaults'}): speed-up unknown, its trials were not "
                      "timed against static AR (r=32) in the same rounds, as recorded before paired timing (needs ≥ 4x)",
                      None)
    else:
        best = paired.sort("speedup").row(-1, named=True)
        sp = speedup_est(best)
        speed = Check(f"fastest diffusion row ({best['setting'] or 'defaults'}) is {sp.fmt('.2f', unit='x')} static AR (r=32), "
                      "paired (needs ≥ 4x)", decide(sp, ">=", 4.0))
    delta = Est(best["delta_accuracy"], *(best["delta_accuracy_lo"], best["delta_accuracy_hi"])) \
        if best["delta_accuracy_lo"] is not None else Est(best["delta_accuracy"], -np.inf, np.inf)
    done = _done(df)
    pool = done.filter(pl.col("number").is_in([best["number"], *table.filter(pl.col("reference"))["number"]])) \
        if "number" in done.columns else done
    return [speed, _accuracy_check(f"its accuracy change is {delta.fmt('+.1f')} points (needs ≥ −1)",
                                   decide(delta, ">=", -1.0), _flat_accuracy(pool))]


CLAIMS: tuple[Claim, ...] = (
    Claim("pareto", "pareto_r_inner_beta", "Fig. 6 (fig:pareto)",
          "Moderate noise (β_t = 0.2) dominates runs without noise, and even the fastest point of the front loses "
          "only about 2 points of accuracy.", noise_dominates),
    Claim("heatmap", "pareto_r_inner_beta", "appendix heatmap (fig:heatmap)",
          "Across noise levels, accuracy rises and throughput falls with the inner recurrence r′.", r_inner_trade),
    Claim("tradeoff", "pareto_r_inner_beta", "appendix trade-off (fig:tradeoff)",
          "At a given r′, moderate noise is not dominated by sampling without noise.", noise_per_r_inner),
    Claim("tradeoff_r_inner", "tradeoff_r_inner", "Fig. 3 left (fig:hyperparam_sweeps1)",
          "Inner recurrence stabilises sampling: accuracy rises with r′ at the cost of throughput.", r_inner_trade),
    Claim("tradeoff_epsilon", "tradeoff_epsilon", "Fig. 3 right (fig:hyperparam_sweeps1)",
          "The exit threshold ε trades throughput against accuracy most directly: a larger ε is faster and less "
          "accurate.", epsilon_trade),
    Claim("tradeoff_eta", "eta", "Fig. 4 left (fig:hyperparam_sweeps3)",
          "Small but non-zero embedding momentum η is optimal.", small_momentum),
    Claim("tradeoff_beta", "beta_schedule", "Fig. 4 right (fig:hyperparam_sweeps3)",
          "At r′ = 4, adding noise (scheduled linearly) is not optimal.", no_noise_at_r4),
    Claim("tradeoff_wavefront", "wavefront", "Fig. 7 left (fig:hyperparam_sweeps5)",
          "Throughput grows with the wavefront size up to about 64–128.", wavefront_growth),
    Claim("tradeoff_headway", "headway", "Fig. 7 right (fig:hyperparam_sweeps5)",
          "A headway above 1 does not give a practical speed-up.", headway_no_gain),
    Claim("tradeoff_init_scale", "init_scale", "appendix, init scale (fig:hyperparam_sweeps2 left)",
          "The scale α of new states has only a minor effect.", minor_effect_init_scale),
    Claim("tradeoff_continuous_compute", "continuous_compute", "appendix, continuous compute "
          "(fig:hyperparam_sweeps2 right)",
          "Initialising new states from the state to their left (continuous compute) is less effective.",
          continuous_compute_worse),
    Claim("cache_sharing", "kv_sharing", "Fig. 2 (fig:cache_sharing)",
          "Sharing one KV cache across recurrences matches per-step caches in accuracy, and its memory no longer grows "
          "with r (r times less for the core block).",
          kv_sharing_free),
    Claim("token_stability", "pareto_r_inner_beta", "appendix failure example (fig:token_stability)",
          "Candidate tokens change during the first steps and settle before they are frozen.", tokens_settle),
    Claim("latent_change", "pareto_r_inner_beta", "Sec. 4, latent-distance freezing",
          "A position's latent change δ shrinks while it stays in the wavefront, which is what freezing keys on.",
          delta_shrinks),
    Claim("qualitative_examples", "pareto_r_inner_beta", "Fig. 5 (fig:qualitative_examples)",
          "At r′ = 4 tokens freeze quickly; smaller r′ needs more sampler steps per token.", small_r_inner_stalls),
    Claim("table1", "table1", "Table 1 (tab:sampler_comparison)",
          "The diffusion sampler is 4–5x faster than static AR at r=32 with accuracy within about 1 point.",
          diffusion_speedup),
)


def judge_all(trials: dict[str, pl.DataFrame], claims: Sequence[Claim] = CLAIMS) -> list[tuple[Claim, Verdict]]:
    """Each claim judged on its recipe's trials (`trials`: recipe → trials table); n/a when the recipe is missing."""
    out = []
    for claim in claims:
        df = trials.get(claim.recipe)
        out.append((claim, claim.judge(df) if df is not None and not df.is_empty()
                    else Verdict(reason=f"no trials of recipe {claim.recipe}")))
    return out
