"""One judge per paper claim: each turns a recipe's trials (and traces) into checks, with the paper's words made
numeric next to each threshold (:mod:`analysis.claims` pairs them with the claims)."""
from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from analysis.evidence import (
    NOISE_BETA,
    SPEED_NAMES,
    TREND,
    accuracy_check,
    at_least,
    best_by,
    completed,
    diffusion_rows,
    est_at,
    flat_accuracy,
    hypervolume_est,
    means_by,
    nearest,
    pct,
    trend_check,
)
from analysis.intervals import (
    Est,
    all_of,
    decide,
    ests,
    fisher_interval,
    group_means,
    mean,
    row_est,
    spearman,
    speed_column,
    t_mean,
    wilson,
)
from analysis.labels import benchmark_name, label, setting
from analysis.pareto import noisy_dominates, noisy_pareto_front
from analysis.reference import delta_accuracy, is_paper_reference, reference_label, reference_trials, trials_of
from analysis.speedup import speedup_est, speedup_table
from analysis.trace_plots import position_stats
from analysis.trials import load_trace
from analysis.verdicts import Check, Untestable, judged


@judged
def noise_dominates(df: pl.DataFrame) -> list[Check]:
    """fig:pareto — moderate noise dominates none; the fastest front point loses at most 2 points."""
    diff = diffusion_rows(df)
    if "beta" not in diff.columns or diff["beta"].drop_nulls().n_unique() < 2:
        raise Untestable(f"{label('beta')} does not vary")
    moderate = nearest([b for b in diff["beta"].unique().to_list() if b and b > 0], NOISE_BETA)
    none = diff.filter(pl.col("beta") == 0.0)
    if moderate is None or none.is_empty():
        raise Untestable(f"needs trials at {label('beta')} = 0 and > 0")
    speed = speed_column(diff)
    some = diff.filter(pl.col("beta") == moderate)
    hv_some, hv_none = hypervolume_est(some, speed), hypervolume_est(none, speed)
    checks = [Check(f"hypervolume (accuracy × {SPEED_NAMES[speed]}) of the {setting('beta', moderate)} trials "
                    f"{hv_some.fmt()} vs {setting('beta', 0.0)} {hv_none.fmt()} (needs ≥, intervals apart)",
                    at_least(hv_some, hv_none))]
    fastest = noisy_pareto_front(diff, ("accuracy", speed)).sort(speed).tail(1)
    ref = reference_trials(completed(df))
    if not ref.is_empty():
        base, what = mean(ests(ref, "accuracy")), reference_label(ref)
        pool = pl.concat([diff, ref], how="diagonal_relaxed")
    else:
        base, what, pool = ests(diff.sort("accuracy").tail(1), "accuracy")[0], "the best diffusion trial", diff
    fastest_acc, fastest = ests(fastest, "accuracy")[0], fastest.row(0, named=True)
    loss = delta_accuracy(base, fastest_acc)
    checks.append(accuracy_check(f"fastest front point ({SPEED_NAMES[speed]} {fastest[speed]:.3g}) loses "
                                  f"{loss.fmt('+.1f')} points against {what} (needs ≤ 2)",
                                  decide(loss, "<=", 2.0), flat_accuracy(pool)))
    return checks


@judged
def noise_per_r_inner(df: pl.DataFrame) -> list[Check]:
    """fig:tradeoff — at a given r′, moderate noise is not dominated by no noise."""
    diff = diffusion_rows(df)
    if not {"beta", "r_inner"} <= set(diff.columns) or diff["beta"].drop_nulls().n_unique() < 2:
        raise Untestable(f"{label('beta')} does not vary")
    moderate = nearest([b for b in diff["beta"].unique().to_list() if b and b > 0], NOISE_BETA)
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
            ties.append(f"{setting('r_inner', r)}: {pct(ea[0])} at {ea[1].fmt()} vs {pct(eb[0])} at {eb[1].fmt()}")
    total = clear + dominated + tied
    if not total:
        raise Untestable(f"no r′ with trials at both {label('beta')} = 0 and {moderate}")
    passed = True if 2 * clear >= total else False if 2 * dominated > total else None
    return [Check(f"{setting('beta', moderate)} is undominated by {setting('beta', 0.0)} beyond the 95% intervals at "
                  f"{clear} of {total} {label('r_inner')} values, dominated at {dominated}, tied within the intervals "
                  f"at {tied}{' (' + ', '.join(ties) + ')' if ties else ''} (needs undominated at least half)", passed)]


@judged
def r_inner_trade(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps1 left, fig:heatmap — accuracy rises, throughput falls with r′."""
    diff = diffusion_rows(df)
    return [trend_check(diff, "r_inner", "accuracy", +1), trend_check(diff, "r_inner", speed_column(diff), -1)]


@judged
def epsilon_trade(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps1 right — a larger ε: more tokens/s, less accuracy."""
    diff = diffusion_rows(df)
    return [trend_check(diff, "epsilon", speed_column(diff), +1), trend_check(diff, "epsilon", "accuracy", -1)]


@judged
def small_momentum(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps3 left — small but non-zero η is best (small: 0 < η ≤ 0.3)."""
    diff = diffusion_rows(df)
    m = means_by(diff, "eta", "accuracy")
    small = m.filter((pl.col("eta") > 0) & (pl.col("eta") <= 0.3))
    large = m.filter(pl.col("eta") > 0.3)
    if 0.0 not in m["eta"].to_list() or small.is_empty():
        raise Untestable(f"needs {label('eta')} = 0 and a value in (0, 0.3]")
    flat = flat_accuracy(diff)
    eta_best, best_small = best_by(small, "eta", "accuracy")
    zero = est_at(m, "eta", 0.0, "accuracy")
    gain = delta_accuracy(best_small, zero)
    checks = [accuracy_check(f"best small {setting('eta', eta_best)}: {pct(best_small)} vs {setting('eta', 0.0)}: "
                              f"{pct(zero)}, {gain.fmt('+.1f')} points (needs > 0)", decide(gain, ">", 0.0), flat)]
    if not large.is_empty():
        eta_large, best_large = best_by(large, "eta", "accuracy")
        over = delta_accuracy(best_large, best_small)
        checks.append(accuracy_check(f"best {label('eta')} > 0.3 ({setting('eta', eta_large)}): {pct(best_large)}, "
                                      f"{over.fmt('+.1f')} points against the best small (needs ≤ 0)",
                                      decide(over, "<=", 0.0), flat))
    return checks


@judged
def no_noise_at_r4(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps3 right — at r′ = 4, with noise scheduled linearly, β_t = 0 is best."""
    diff = diffusion_rows(df)
    if "r_inner" in diff.columns and (diff["r_inner"] == 4).any():
        diff = diff.filter(pl.col("r_inner") == 4)
    if "beta_schedule" in diff.columns and (diff["beta_schedule"] == "linear").any():
        diff = diff.filter(pl.col("beta_schedule") == "linear")
    m = means_by(diff, "beta", "accuracy")
    if 0.0 not in m["beta"].to_list():
        raise Untestable(f"no trial at {label('beta')} = 0")
    zero = est_at(m, "beta", 0.0, "accuracy")
    at, best = best_by(m.filter(pl.col("beta") > 0), "beta", "accuracy")
    lead = delta_accuracy(zero, best)
    return [accuracy_check(f"{setting('beta', 0.0)}: {pct(zero)} vs best noisy {setting('beta', at)}: {pct(best)}, "
                            f"{lead.fmt('+.1f')} points (needs ≥ 0)", decide(lead, ">=", 0.0), flat_accuracy(diff))]


def _saturation(w: list[Any], v: list[Est]) -> tuple[Any, Any]:
    """The range of W at which the speed can first come within 5% of its maximum, given the intervals: earliest
    when that W sits at its high end and the maximum at its low end, latest the other way round (no later than the
    last W that can be the maximum itself). Zero-width intervals give one W."""
    top_lo, top_hi = max(e.lo for e in v), max(e.hi for e in v)
    earliest = next(x for x, e in zip(w, v) if e.hi >= 0.95 * top_lo)
    surely = next((x for x, e in zip(w, v) if e.lo >= 0.95 * top_hi), None)
    can_be_top = [x for x, e in zip(w, v) if e.hi >= top_lo][-1]
    return earliest, can_be_top if surely is None else min(surely, can_be_top)


@judged
def wavefront_growth(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps5 left — tokens/s grows with W up to about 64–128."""
    diff = diffusion_rows(df)
    speed = speed_column(diff)
    m = means_by(diff, "wavefront", speed)
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


@judged
def headway_no_gain(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps5 right — a headway above 1 gives no practical speed-up (≤ 10%)."""
    diff = diffusion_rows(df)
    speed = speed_column(diff)
    m = means_by(diff, "headway", speed)
    if 1 not in m["headway"].to_list():
        raise Untestable("no trial at headway = 1")
    one = est_at(m, "headway", 1, speed)
    at, best = best_by(m.filter(pl.col("headway") > 1), "headway", speed)
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


@judged
def minor_effect_init_scale(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps2 left — α has a minor effect: accuracy within 2 points, tokens/s within 10%."""
    diff = diffusion_rows(df)
    speed = speed_column(diff)
    m = means_by(diff, "init_scale", "accuracy", speed)
    rows = list(m.iter_rows(named=True))
    acc = _spread([row_est(r, "accuracy") for r in rows], 0.01, " points", 2.0)
    checks = [accuracy_check(f"accuracy spread over {label('init_scale')}: {acc.text}", acc.passed,
                              flat_accuracy(diff))]
    sp = [row_est(r, speed) for r in rows]
    rel = _spread(sp, float(np.median([e.value for e in sp])) / 100.0, "% of the median", 10.0)
    checks.append(Check(f"{SPEED_NAMES[speed]} spread: {rel.text}", rel.passed))
    return checks


@judged
def continuous_compute_worse(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps2 right — continuous compute is less effective than fresh states."""
    diff = diffusion_rows(df)
    if "continuous_compute" not in diff.columns or diff["continuous_compute"].drop_nulls().n_unique() < 2:
        raise Untestable(f"{label('continuous_compute')} does not vary")
    speed = speed_column(diff)
    on, off = (diff.filter(pl.col("continuous_compute") == v) for v in (True, False))
    hv_on, hv_off = hypervolume_est(on, speed), hypervolume_est(off, speed)
    checks = [Check(f"hypervolume (accuracy × {SPEED_NAMES[speed]}) without {hv_off.fmt()} vs with {hv_on.fmt()} "
                    "(needs ≥, intervals apart)", at_least(hv_off, hv_on))]
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
            checks.append(accuracy_check(
                f"accuracy with it ≤ without beyond the 95% intervals at {worse} of {total} {label('r_inner')} values, "
                f"above at {better} (needs at least half)", passed, flat_accuracy(diff)))
    return checks


@judged
def kv_sharing_free(df: pl.DataFrame) -> list[Check]:
    """fig:cache_sharing — sharing matches per-step caches in accuracy (within 1 point) and its memory does not grow
    with r, while per-step caches do."""
    done = completed(df)
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
    return [accuracy_check(f"largest accuracy gap shared vs per-step over {len(gaps)} r values: {largest.fmt('+.1f')} "
                            f"points, the 95% intervals reach {reach:.1f} (needs within ±1)", passed,
                            flat_accuracy(st)),
            Check(f"shared KV memory varies {100 * (flat - 1):.0f}% over r (needs ≤ 5%); per-step ÷ shared grows with "
                  f"r (ρ = {rho:+.2f}, needs ≥ +{TREND}){grows}", flat <= 1.05 and rho >= TREND)]


def _traces(df: pl.DataFrame) -> list[tuple[dict, str]]:
    from pathlib import Path

    out = []
    for row in completed(df).iter_rows(named=True):
        for p in row.get("trace_paths") or []:
            if p and Path(p).is_file():
                out.append((row, p))
    if not out:
        raise Untestable("no diffusion traces")
    return out


@judged
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
    checks = [Check(f"{pct(change)} of {total} positions change their token in the wavefront (needs ≥ 10%)",
                    decide(change, ">=", 0.10))]
    if changed:
        checks.append(Check(f"{pct(settle)} of those {changed} were unchanged in the step they froze (needs ≥ 90%)",
                            decide(settle, ">=", 0.90)))
    return checks


@judged
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


@judged
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


@judged
def diffusion_speedup(df: pl.DataFrame) -> list[Check]:
    """tab:sampler_comparison — diffusion is 4–5× static AR (r=32) within about 1 point of accuracy."""
    if not is_paper_reference(completed(df)):
        raise Untestable(f"needs speed-ups against static AR (r=32); the study timed against {reference_label(df)}")
    table = speedup_table(df)
    diff = table.filter((pl.col("sampler") == "diffusion") & pl.col("delta_accuracy").is_not_null())
    if diff.is_empty():
        raise Untestable("needs diffusion trials and static AR at r=32")
    paired = diff.filter(pl.col("paired"))
    if paired.is_empty():
        best = diff.sort("tokens_per_s").row(-1, named=True)
        speed = Check(f"fastest diffusion row ({best['setting'] or 'defaults'}): speed-up unknown, its trials were not "
                      "timed against static AR (r=32) in the same rounds, as recorded before paired timing "
                      "(needs ≥ 4x)", None)
    else:
        best = paired.sort("speedup").row(-1, named=True)
        sp = speedup_est(best)
        speed = Check(f"fastest diffusion row ({best['setting'] or 'defaults'}) is {sp.fmt('.2f', unit='x')} "
                      "static AR (r=32), paired (needs ≥ 4x)", decide(sp, ">=", 4.0))
    delta = Est(best["delta_accuracy"], *(best["delta_accuracy_lo"], best["delta_accuracy_hi"])) \
        if best["delta_accuracy_lo"] is not None else Est(best["delta_accuracy"], -np.inf, np.inf)
    done = completed(df)
    pool = done.filter(pl.col("number").is_in([best["number"], *table.filter(pl.col("reference"))["number"]])) \
        if "number" in done.columns else done
    return [speed, accuracy_check(f"its accuracy change is {delta.fmt('+.1f')} points (needs ≥ −1)",
                                   decide(delta, ">=", -1.0), flat_accuracy(pool))]


DIFFUSION_DEFAULTS = "diffusion"    # the paper's settings (Sec. 4), the sampler's defaults
LOOPSPEC = "loopspec r=32"          # the LoopSpec baseline: r_draft=4, no second readout (recdiff.study.baselines)


def _answers(rows: pl.DataFrame) -> dict[str, str] | None:
    """problem → output of the first of `rows` whose per-sample table can be read (None: none can)."""
    from pathlib import Path

    for path in rows["samples_path"].to_list() if "samples_path" in rows.columns else []:
        if path and Path(path).is_file():
            return dict(pl.read_parquet(path, columns=["problem_id", "output"]).iter_rows())
    return None


def _lossless(spec: pl.DataFrame, ref: pl.DataFrame, where: str) -> Check:
    """LoopSpec answers as static AR (r=32): the same output on every problem (its accuracy is then static AR's,
    exactly), else its accuracy within 1 point of static AR's."""
    mine, theirs = _answers(spec), _answers(ref)
    same = [mine[p] == theirs[p] for p in mine if p in theirs] if mine and theirs else []
    acc = mean(ests(spec, "accuracy"))
    if same and all(same):
        return Check(f"LoopSpec gave static AR (r=32)'s answer on all {len(same)} problems{where}, so its accuracy is "
                     f"static AR's exactly ({pct(acc)}): lossless, as greedy decoding promises", True)
    delta = delta_accuracy(acc, mean(ests(ref, "accuracy")))
    differ = f"its answers differ from static AR (r=32)'s on {len(same) - sum(same)} of {len(same)} problems" \
        if same else "no per-sample tables to compare its answers with static AR (r=32)'s"
    return Check(f"LoopSpec{where}: {differ}; accuracy change {delta.fmt('+.1f')} points (needs within ±1: lossless)",
                 True if -1.0 <= delta.lo and delta.hi <= 1.0 else False if delta.lo > 1.0 or delta.hi < -1.0 else None)


@judged
def diffusion_vs_loopspec(df: pl.DataFrame) -> list[Check]:
    """LoopSpec comparison (not in the paper) — the diffusion sampler at its defaults is faster than LoopSpec at r=32
    (the ratio of their paired speed-ups against static AR r=32 > 1) within 1 point of its accuracy; LoopSpec is
    lossless (static AR r=32's answers)."""
    done = completed(df)
    if not is_paper_reference(done):
        raise Untestable(f"needs speed-ups against static AR (r=32); the study timed against {reference_label(df)}")
    diff, spec = trials_of(done, DIFFUSION_DEFAULTS), trials_of(done, LOOPSPEC)
    if diff.is_empty() or spec.is_empty():
        raise Untestable("needs the diffusion sampler at its defaults and LoopSpec at r=32 (r_draft=4)")
    if "benchmark" not in done.columns:
        diff, spec, done = (x.with_columns(pl.lit(None, pl.String).alias("benchmark")) for x in (diff, spec, done))
    benches = [b for b in dict.fromkeys(diff["benchmark"].to_list()) if b in spec["benchmark"].to_list()]
    if not benches:
        raise Untestable("the diffusion defaults and LoopSpec share no benchmark")
    checks = []
    for bench in benches:
        d, s, everything = (x.filter(pl.col("benchmark").eq_missing(bench)) for x in (diff, spec, done))
        where = f" on {benchmark_name(bench)}" if len(benches) > 1 else ""
        fast, slow = (mean(ests(x, "speedup")) if "speedup" in x.columns else Est(np.nan, -np.inf, np.inf)
                      for x in (d, s))
        if fast.known and slow.known:
            gain = fast.ratio(slow)
            checks.append(Check(f"the diffusion defaults{where} run {gain.fmt('.2f', unit='x')} LoopSpec's speed "
                                "(their paired speed-ups against static AR (r=32), divided; needs > 1x)",
                                decide(gain, ">", 1.0)))
        else:
            checks.append(Check(f"the diffusion defaults against LoopSpec{where}: speed-up unknown, not both timed "
                                "against static AR (r=32) in their rounds (needs > 1x)", None))
        delta = delta_accuracy(mean(ests(d, "accuracy")), mean(ests(s, "accuracy")))
        checks.append(accuracy_check(f"their accuracy change{where} is {delta.fmt('+.1f')} points against LoopSpec "
                                     "(needs ≥ −1)", decide(delta, ">=", -1.0), flat_accuracy(pl.concat([d, s]))))
        ref = reference_trials(everything)
        if not ref.is_empty():
            checks.append(_lossless(s, ref, where))
    return checks
