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

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from analysis.judges import (
    continuous_compute_worse,
    delta_shrinks,
    diffusion_speedup,
    diffusion_vs_loopspec,
    epsilon_trade,
    headway_no_gain,
    kv_sharing_free,
    minor_effect_init_scale,
    no_noise_at_r4,
    noise_dominates,
    noise_per_r_inner,
    r_inner_trade,
    small_momentum,
    small_r_inner_stalls,
    tokens_settle,
    wavefront_growth,
)
from analysis.verdicts import Judge, Verdict


@dataclass(frozen=True)
class Claim:
    figure: str            # file stem written by `analysis report` for the recipe's study
    recipe: str            # sweeps/<recipe>.yaml
    paper: str             # where the paper shows it
    text: str              # the paper's claim, one sentence
    judge: Judge


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
    # not a claim of the paper: the same comparison against LoopSpec, the lossless self-speculative baseline
    Claim("pareto", "table1", "LoopSpec comparison (not in the paper)",
          "The diffusion sampler at its defaults is faster than LoopSpec (r=32, r_draft=4) with accuracy within about "
          "1 point of it; LoopSpec, lossless, answers as static AR at r=32 does.", diffusion_vs_loopspec),
)


def judge_all(trials: dict[str, pl.DataFrame], claims: Sequence[Claim] = CLAIMS) -> list[tuple[Claim, Verdict]]:
    """Each claim judged on its recipe's trials (`trials`: recipe → trials table); n/a when the recipe is missing."""
    out = []
    for claim in claims:
        df = trials.get(claim.recipe)
        out.append((claim, claim.judge(df) if df is not None and not df.is_empty()
                    else Verdict(reason=f"no trials of recipe {claim.recipe}")))
    return out
