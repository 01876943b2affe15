"""The paper's claim for each figure, and whether a study's data agrees with it.

Every verdict is computed from the trials (and their traces): a claim is one or more *checks*, each a number from
the data compared with what the paper reports, e.g. "accuracy rises with r′" is a Spearman rank correlation of at
least +0.5 between r′ and the mean accuracy per r′. A claim whose checks all pass **agrees**, one whose checks all
fail **disagrees**, a mix is **partly**, and a claim the data cannot test (a parameter that never varies, no traces)
is **n/a**. The thresholds are the paper's own words made numeric and sit next to each check.

Accuracy on a CPU-sized slice carries a wide interval (about ±7 points at 200 problems); the checks compare
measured values as they are, and the report states the interval next to the verdicts.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from analysis.labels import label, setting
from analysis.pareto import dominates, frame_hypervolume, pareto_front
from analysis.plots import position_stats, split_baselines
from analysis.load import load_trace
from analysis.tables import reference_trials, speedup_table

TREND = 0.5        # |Spearman ρ| a "rises"/"falls with" claim needs
NOISE_BETA = 0.2   # the paper's "moderate noise"


@dataclass(frozen=True)
class Check:
    text: str              # what was measured, with the numbers
    passed: bool


@dataclass
class Verdict:
    checks: list[Check] = field(default_factory=list)
    reason: str | None = None  # why the data cannot test the claim (status n/a)

    @property
    def status(self) -> str:
        if not self.checks:
            return "n/a"
        passed = sum(c.passed for c in self.checks)
        return "agrees" if passed == len(self.checks) else "disagrees" if passed == 0 else "partly"

    @property
    def evidence(self) -> str:
        if not self.checks:
            return self.reason or "not testable on this data"
        return "; ".join(f"{c.text} {'✓' if c.passed else '✗'}" for c in self.checks)

    @property
    def disagreement(self) -> float:
        """Share of failed checks (0 agrees … 1 disagrees); n/a counts as 0."""
        return sum(not c.passed for c in self.checks) / len(self.checks) if self.checks else 0.0


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


def _diffusion(df: pl.DataFrame) -> pl.DataFrame:
    done = df.filter(pl.col("state") == "COMPLETE") if "state" in df.columns else df
    return split_baselines(done.filter(pl.col("accuracy").is_not_null() & pl.col("tokens_per_s").is_not_null()))[0]


def _means(df: pl.DataFrame, param: str, *metrics: str) -> pl.DataFrame:
    """Mean of each metric per value of `param` (other keys averaged over), sorted by `param`."""
    if param not in df.columns or df[param].drop_nulls().n_unique() < 2:
        raise Untestable(f"{label(param)} does not vary")
    return (df.filter(pl.col(param).is_not_null())
            .group_by(param).agg(pl.col(m).cast(pl.Float64).mean() for m in metrics).sort(param))


def _spearman(x: Sequence[float], y: Sequence[float]) -> float:
    xr, yr = (pl.Series(v, dtype=pl.Float64).rank("average").to_numpy() for v in (x, y))
    if np.std(xr) == 0 or np.std(yr) == 0:
        return 0.0
    return float(np.corrcoef(xr, yr)[0, 1])


def _trend(df: pl.DataFrame, param: str, metric: str, sign: int) -> Check:
    """`metric` rises (sign +1) or falls (−1) with `param`: Spearman ρ over the per-value means."""
    m = _means(df, param, metric)
    rho = _spearman(m[param].cast(pl.Float64).to_list(), m[metric].to_list())
    word = "rises" if sign > 0 else "falls"
    return Check(f"{label(metric)} {word} with {label(param)}: Spearman ρ = {rho:+.2f} over {len(m)} values "
                 f"(needs {'≥ +' if sign > 0 else '≤ −'}{TREND})", sign * rho >= TREND)


def _pts(v: float) -> str:
    return f"{100 * v:.1f}%"


def _near(values: Sequence[float], target: float) -> float | None:
    values = [v for v in values if v is not None]
    return min(values, key=lambda v: (abs(v - target), v)) if values else None


def _value_at(m: pl.DataFrame, param: str, value: Any, metric: str) -> float:
    return float(m.filter(pl.col(param) == value)[metric][0])


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
    some = diff.filter(pl.col("beta") == moderate)
    hv_some, hv_none = frame_hypervolume(some, (0.0, 0.0)), frame_hypervolume(none, (0.0, 0.0))
    checks = [Check(f"hypervolume of the {setting('beta', moderate)} trials {hv_some:.3g} vs "
                    f"{setting('beta', 0.0)} {hv_none:.3g} (needs ≥)", hv_some >= hv_none)]
    front = pareto_front(diff).sort("tokens_per_s")
    fastest = front.row(-1, named=True)
    ref = reference_trials(df.filter(pl.col("state") == "COMPLETE") if "state" in df.columns else df)
    base, what = (float(ref["accuracy"].mean()), "static AR (r=32)") if not ref.is_empty() \
        else (float(diff["accuracy"].max()), "the best diffusion trial")
    loss = 100 * (base - fastest["accuracy"])
    checks.append(Check(f"fastest front point ({fastest['tokens_per_s']:.1f} tokens/s) loses {loss:+.1f} points "
                        f"against {what} (needs ≤ 2)", loss <= 2.0))
    return checks


@_judged
def noise_per_r_inner(df: pl.DataFrame) -> list[Check]:
    """fig:tradeoff — at a given r′, moderate noise is not dominated by no noise."""
    diff = _diffusion(df)
    if not {"beta", "r_inner"} <= set(diff.columns) or diff["beta"].drop_nulls().n_unique() < 2:
        raise Untestable(f"{label('beta')} does not vary")
    moderate = _near([b for b in diff["beta"].unique().to_list() if b and b > 0], NOISE_BETA)
    m = diff.group_by("r_inner", "beta").agg(pl.col("accuracy").mean(), pl.col("tokens_per_s").mean())
    held = total = 0
    for r in sorted(m["r_inner"].unique().to_list()):
        a, b = m.filter((pl.col("r_inner") == r) & (pl.col("beta") == moderate)), \
            m.filter((pl.col("r_inner") == r) & (pl.col("beta") == 0.0))
        if a.is_empty() or b.is_empty():
            continue
        total += 1
        held += not dominates(b.select("accuracy", "tokens_per_s").row(0), a.select("accuracy", "tokens_per_s").row(0))
    if not total:
        raise Untestable(f"no r′ with trials at both {label('beta')} = 0 and {moderate}")
    return [Check(f"{setting('beta', moderate)} is undominated by {setting('beta', 0.0)} at {held} of {total} "
                  f"{label('r_inner')} values (needs at least half)", 2 * held >= total)]


@_judged
def r_inner_trade(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps1 left, fig:heatmap — accuracy rises, throughput falls with r′."""
    diff = _diffusion(df)
    return [_trend(diff, "r_inner", "accuracy", +1), _trend(diff, "r_inner", "tokens_per_s", -1)]


@_judged
def epsilon_trade(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps1 right — a larger ε: more tokens/s, less accuracy."""
    diff = _diffusion(df)
    return [_trend(diff, "epsilon", "tokens_per_s", +1), _trend(diff, "epsilon", "accuracy", -1)]


@_judged
def small_momentum(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps3 left — small but non-zero η is best (small: 0 < η ≤ 0.3)."""
    m = _means(_diffusion(df), "eta", "accuracy")
    etas = m["eta"].to_list()
    small = m.filter((pl.col("eta") > 0) & (pl.col("eta") <= 0.3))
    large = m.filter(pl.col("eta") > 0.3)
    if 0.0 not in etas or small.is_empty():
        raise Untestable(f"needs {label('eta')} = 0 and a value in (0, 0.3]")
    best_small = float(small["accuracy"].max())
    eta_best = small.filter(pl.col("accuracy") == best_small)["eta"][0]
    zero = _value_at(m, "eta", 0.0, "accuracy")
    checks = [Check(f"best small {setting('eta', eta_best)}: {_pts(best_small)} vs {setting('eta', 0.0)}: "
                    f"{_pts(zero)} (needs >)", best_small > zero)]
    if not large.is_empty():
        best_large = float(large["accuracy"].max())
        checks.append(Check(f"best {label('eta')} > 0.3: {_pts(best_large)} (needs ≤ {_pts(best_small)})",
                            best_large <= best_small))
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
    zero = _value_at(m, "beta", 0.0, "accuracy")
    noisy = m.filter(pl.col("beta") > 0)
    best = float(noisy["accuracy"].max())
    at = noisy.filter(pl.col("accuracy") == best)["beta"][0]
    return [Check(f"{setting('beta', 0.0)}: {_pts(zero)} vs best noisy {setting('beta', at)}: {_pts(best)} "
                  "(needs ≥)", zero >= best)]


@_judged
def wavefront_growth(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps5 left — tokens/s grows with W up to about 64–128."""
    m = _means(_diffusion(df), "wavefront", "tokens_per_s")
    w, tps = m["wavefront"].to_list(), m["tokens_per_s"].to_list()
    top = max(tps)
    saturates = next(v for v, t in zip(w, tps) if t >= 0.95 * top)
    mid = [t for v, t in zip(w, tps) if 64 <= v <= 128]
    checks = [Check(f"tokens/s first within 5% of its maximum ({top:.1f}) at W = {saturates} (needs 64–128)",
                    64 <= saturates <= 128)]
    if mid:
        checks.append(Check(f"W in 64–128 reaches {max(mid):.1f} tokens/s vs {tps[0]:.1f} at W = {w[0]} "
                            "(needs ≥ 5% more)", max(mid) >= 1.05 * tps[0]))
    return checks


@_judged
def headway_no_gain(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps5 right — a headway above 1 gives no practical speed-up (≤ 10%)."""
    m = _means(_diffusion(df), "headway", "tokens_per_s")
    if 1 not in m["headway"].to_list():
        raise Untestable("no trial at headway = 1")
    one = _value_at(m, "headway", 1, "tokens_per_s")
    more = m.filter(pl.col("headway") > 1)
    best = float(more["tokens_per_s"].max())
    at = more.filter(pl.col("tokens_per_s") == best)["headway"][0]
    return [Check(f"best headway > 1 (headway={at}) runs {best / one:.2f}x headway=1's tokens/s (needs ≤ 1.10x)",
                  best <= 1.10 * one)]


@_judged
def minor_effect_init_scale(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps2 left — α has a minor effect: accuracy within 2 points, tokens/s within 10%."""
    m = _means(_diffusion(df), "init_scale", "accuracy", "tokens_per_s")
    spread = 100 * (m["accuracy"].max() - m["accuracy"].min())
    tps = m["tokens_per_s"]
    rel = (tps.max() - tps.min()) / tps.median()
    return [Check(f"accuracy spread over {label('init_scale')}: {spread:.1f} points (needs ≤ 2)", spread <= 2.0),
            Check(f"tokens/s spread: {100 * rel:.0f}% of the median (needs ≤ 10%)", rel <= 0.10)]


@_judged
def continuous_compute_worse(df: pl.DataFrame) -> list[Check]:
    """fig:hyperparam_sweeps2 right — continuous compute is less effective than fresh states."""
    diff = _diffusion(df)
    if "continuous_compute" not in diff.columns or diff["continuous_compute"].drop_nulls().n_unique() < 2:
        raise Untestable(f"{label('continuous_compute')} does not vary")
    on, off = (diff.filter(pl.col("continuous_compute") == v) for v in (True, False))
    hv_on, hv_off = frame_hypervolume(on, (0.0, 0.0)), frame_hypervolume(off, (0.0, 0.0))
    checks = [Check(f"hypervolume without {hv_off:.3g} vs with {hv_on:.3g} (needs ≥)", hv_off >= hv_on)]
    if "r_inner" in diff.columns:
        m = diff.group_by("r_inner", "continuous_compute").agg(pl.col("accuracy").mean())
        pairs = m.pivot(on="continuous_compute", index="r_inner", values="accuracy").drop_nulls()
        if pairs.height and {"true", "false"} <= set(pairs.columns):
            worse = int((pairs["true"] <= pairs["false"]).sum())
            checks.append(Check(f"accuracy with it ≤ without at {worse} of {pairs.height} {label('r_inner')} values "
                                "(needs at least half)", 2 * worse >= pairs.height))
    return checks


@_judged
def kv_sharing_free(df: pl.DataFrame) -> list[Check]:
    """fig:cache_sharing — sharing matches per-step caches in accuracy (within 1 point) and its memory does not grow
    with r, while per-step caches do."""
    done = df.filter(pl.col("state") == "COMPLETE") if "state" in df.columns else df
    if "kv_cache" not in done.columns:
        raise Untestable("no kv_cache setting")
    st = done.filter((pl.col("sampler") == "static") & pl.col("kv_cache").is_not_null())
    m = st.group_by("r", "kv_cache").agg(pl.col("accuracy").mean(), pl.col("kv_cache_bytes").mean())
    acc = m.pivot(on="kv_cache", index="r", values="accuracy").sort("r")
    mem = m.pivot(on="kv_cache", index="r", values="kv_cache_bytes").sort("r")
    if not {"shared", "per_step"} <= set(acc.columns):
        raise Untestable("needs static AR with kv_cache = shared and per_step")
    acc, mem = acc.drop_nulls(), mem.drop_nulls()
    if acc.is_empty():
        raise Untestable("no r with both KV-cache modes")
    gap = float((100 * (acc["shared"] - acc["per_step"]).abs()).max())
    # "r times less memory": sharing makes the KV memory independent of r, while a cache per recurrence grows with
    # it (by r for the core block's layers; prelude and coda keep one K/V per position either way)
    shared = st.filter(pl.col("kv_cache") == "shared")["kv_cache_bytes"].drop_nulls()
    flat = float(shared.max() / shared.min()) if shared.len() else float("inf")
    rho = _spearman(mem["r"].cast(pl.Float64).to_list(), (mem["per_step"] / mem["shared"]).to_list()) \
        if mem.height > 1 else 0.0
    top = mem.row(-1, named=True)
    return [Check(f"largest accuracy gap shared vs per-step over {acc.height} r values: {gap:.1f} points "
                  "(needs ≤ 1)", gap <= 1.0),
            Check(f"shared KV memory varies {100 * (flat - 1):.0f}% over r (needs ≤ 5%); per-step ÷ shared grows with "
                  f"r (ρ = {rho:+.2f}, needs ≥ +{TREND}) to {top['per_step'] / top['shared']:.1f}x at r={top['r']}",
                  flat <= 1.05 and rho >= TREND)]


def _traces(df: pl.DataFrame) -> list[tuple[dict, str]]:
    from pathlib import Path

    done = df.filter(pl.col("state") == "COMPLETE") if "state" in df.columns else df
    out = []
    for row in done.iter_rows(named=True):
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
        tokens, p0 = t["tokens"], t["prompt_len"]
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
    share = settled / changed if changed else 0.0
    return [Check(f"{100 * changed / total:.0f}% of {total} positions change their token in the wavefront "
                  f"(needs ≥ 10%), {100 * share:.0f}% of those were unchanged in the step they froze (needs ≥ 90%)",
                  changed >= 0.10 * total and share >= 0.90)]


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
    rho = _spearman(m["age"].to_list(), m["delta"].to_list())
    return [Check(f"median δ vs steps in the wavefront: Spearman ρ = {rho:+.2f} over {m.height} ages "
                  f"(needs ≤ −{TREND})", rho <= -TREND)]


@_judged
def small_r_inner_stalls(df: pl.DataFrame) -> list[Check]:
    """fig:qualitative_examples — r′ = 4 freezes tokens quickly; smaller r′ needs more sampler steps per token."""
    rows = []
    for row, path in _traces(df):
        t = load_trace(path)
        generated = t["tokens"].shape[1] - t["prompt_len"]
        if generated > 0 and row.get("r_inner") is not None:
            rows.append({"r_inner": row["r_inner"], "steps_per_token": t["tokens"].shape[0] / generated})
    m = _means(pl.DataFrame(rows, schema={"r_inner": pl.Int64, "steps_per_token": pl.Float64}),
               "r_inner", "steps_per_token")
    if 4 not in m["r_inner"].to_list() or not (m["r_inner"] < 4).any():
        raise Untestable("needs traces at r′ = 4 and r′ < 4")
    four = _value_at(m, "r_inner", 4, "steps_per_token")
    small = m.filter(pl.col("r_inner") < 4)
    return [Check(f"sampler steps per token: {four:.2f} at r′=4 vs "
                  + ", ".join(f"{v:.2f} at r′={r}" for r, v in small.iter_rows()) + " (needs more below 4)",
                  bool((small["steps_per_token"] > four).all()))]


@_judged
def diffusion_speedup(df: pl.DataFrame) -> list[Check]:
    """tab:sampler_comparison — diffusion is 4–5× static AR (r=32) within about 1 point of accuracy."""
    table = speedup_table(df)
    diff = table.filter((pl.col("sampler") == "diffusion") & pl.col("speedup").is_not_null())
    if diff.is_empty():
        raise Untestable("needs diffusion trials and static AR at r=32")
    best = diff.sort("speedup").row(-1, named=True)
    return [Check(f"fastest diffusion row ({best['setting'] or 'defaults'}) is {best['speedup']:.2f}x static AR "
                  "(r=32) (needs ≥ 4x)", best["speedup"] >= 4.0),
            Check(f"its accuracy change is {best['delta_accuracy']:+.1f} points (needs ≥ −1)",
                  best["delta_accuracy"] >= -1.0)]


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
