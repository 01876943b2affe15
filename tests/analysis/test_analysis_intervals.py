"""issue 32: the interval arithmetic behind the noisy Pareto front and the three-outcome verdicts, against published
and hand-computed values."""
from __future__ import annotations

import math

import polars as pl
import pytest

from analysis.intervals import (
    Est,
    all_of,
    combine,
    common_value,
    decide,
    ests,
    fisher_interval,
    group_means,
    mean,
    spearman_interval,
    speed_column,
    t_mean,
    wilson,
)
from recdiff.benchmarks.stats import wilson_interval

INF = math.inf


def test_difference_of_proportions_is_newcombes_hybrid_score_interval():
    """Newcombe (1998), Statistics in Medicine 17:873, Table II, example (a): 56/70 − 48/80 = 0.2000 with the hybrid
    score interval (method 10) 0.0524 to 0.3339."""
    a, b = Est(56 / 70, *wilson_interval(56, 70)), Est(48 / 80, *wilson_interval(48, 80))
    d = a - b
    assert (d.value, d.lo, d.hi) == pytest.approx((0.2, 0.0524, 0.3339), abs=5e-5)


def test_mover_sum_mean_and_ratio_by_hand():
    # distances to the bounds add in quadrature, each side on its own: 3 − √(1² + 2²), 3 + √(2² + 2²)
    s = combine([Est(1, 0, 3), Est(2, 0, 4)], [1, 1])
    assert (s.value, s.lo, s.hi) == pytest.approx((3, 3 - math.sqrt(5), 3 + math.sqrt(8)))
    m = mean([Est(1, 0, 3), Est(2, 0, 4)])
    assert (m.value, m.lo, m.hi) == pytest.approx((1.5, 1.5 - math.sqrt(5) / 2, 1.5 + math.sqrt(8) / 2))
    assert combine([Est.exact(2), Est(1, 0.5, 1.5)], [1, -1]) == Est(1, 0.5, 1.5)
    # 8 [4, 16] ÷ 2 [1, 4]: log 8 − log 2 = log 4, each side √2·log 2 → 4·2^±√2
    r = Est(8, 4, 16).ratio(Est(2, 1, 4))
    assert (r.value, r.lo, r.hi) == pytest.approx((4, 4 * 2 ** -math.sqrt(2), 4 * 2 ** math.sqrt(2)))
    assert not (Est(1, -INF, INF) - Est.exact(0)).known          # unknown precision stays unknown
    assert not Est(1, 0, 2).ratio(Est(1, 0.5, 2)).known           # a bound at 0 has no logarithm


@pytest.mark.parametrize("est,op,threshold,expected", [
    (Est(5, 4.1, 5.9), ">=", 4, True), (Est(5, 3.9, 5.9), ">=", 4, None), (Est(3, 2, 3.9), ">=", 4, False),
    (Est(4, 4, 4), ">=", 4, True), (Est(4, 4, 4), ">", 4, False), (Est(0, -1, 1), ">", 0, None),
    (Est(1.05, 1.0, 1.09), "<=", 1.10, True), (Est(1.08, 0.97, 1.2), "<=", 1.10, None),
    (Est(1.3, 1.2, 1.4), "<=", 1.10, False), (Est(0.5, 0.1, 0.9), "<", 1, True), (Est(2, -INF, INF), "<", 1, None),
])
def test_decide_only_when_the_interval_lies_on_one_side(est, op, threshold, expected):
    assert decide(est, op, threshold) is expected


def test_three_valued_and_and_common_value():
    assert all_of([True, True]) is True and all_of([True, None]) is None and all_of([None, False]) is False
    assert common_value([Est(1, 0.9, 1), Est(0.95, 0.85, 1)]) == (0.9, 1)
    assert common_value([Est(1, 0.95, 1), Est(0.8, 0.7, 0.9)]) is None


def test_wilson_t_and_fisher_intervals_by_hand():
    w = wilson(7, 20)
    assert (w.value, w.lo, w.hi) == pytest.approx((0.35, 0.18119, 0.56715), abs=1e-5)   # 7/20 at z = 1.96, by hand
    # mean 2, standard error 1/√3, t(0.975, 2) = 4.302653
    t = t_mean([1, 2, 3])
    assert (t.value, t.lo, t.hi) == pytest.approx((2, 2 - 4.302653 / math.sqrt(3), 2 + 4.302653 / math.sqrt(3)))
    assert not t_mean([1.0]).known and t_mean([2.0, 2.0]) == Est.exact(2.0)
    z, half = math.atanh(0.5), 1.959964 * math.sqrt(1.06 / 25)
    f = fisher_interval(0.5, 28)
    assert (f.value, f.lo, f.hi) == pytest.approx((0.5, math.tanh(z - half), math.tanh(z + half)))


def test_spearman_interval():
    exact = [Est.exact(v) for v in (1, 2, 3, 4)]
    assert spearman_interval([1, 2, 3, 4], exact) == Est(1.0, 1.0, 1.0)
    # intervals far apart: the ranking cannot move
    apart = [Est(v, v - 0.1, v + 0.1) for v in (4, 3, 2, 1)]
    assert spearman_interval([1, 2, 3, 4], apart) == Est(-1.0, -1.0, -1.0)
    # all intervals overlapping: any ranking is possible, ρ's interval spans most of [−1, 1]
    wide = spearman_interval([1, 2, 3, 4], [Est(v, 0, 5) for v in (1, 2, 3, 4)])
    assert wide.value == 1.0 and wide.lo < -0.5 and wide.hi == 1.0
    assert wide == spearman_interval([1, 2, 3, 4], [Est(v, 0, 5) for v in (1, 2, 3, 4)])   # seeded
    assert not spearman_interval([1, 2], [Est(1, -INF, INF), Est.exact(2)]).known


def test_columns_to_estimates_and_group_means():
    df = pl.DataFrame({"p": [1, 1, 2], "accuracy": [0.5, 0.6, 0.7], "accuracy_lo": [0.4, 0.5, 0.6],
                       "accuracy_hi": [0.6, 0.7, 0.8], "tokens_per_s": [10.0, 20.0, 30.0],
                       "tokens_per_s_lo": [9.0, None, 29.0], "tokens_per_s_hi": [11.0, None, 31.0]})
    assert ests(df, "accuracy")[0] == Est(0.5, 0.4, 0.6)
    assert not ests(df, "tokens_per_s")[1].known and ests(df, "tokens_per_s", missing="point")[1] == Est.exact(20.0)
    m = group_means(df, "p", ["accuracy", "tokens_per_s"])
    half = math.sqrt(0.1**2 + 0.1**2) / 2
    assert m["accuracy"].to_list() == pytest.approx([0.55, 0.7])
    assert m["accuracy_lo"].to_list() == pytest.approx([0.55 - half, 0.6])
    assert m["tokens_per_s_lo"].to_list() == [None, 29.0]     # a repeat without an interval: the mean has none
    assert speed_column(df) == "tokens_per_s"
    assert speed_column(df.with_columns(speedup=pl.lit(2.0))) == "speedup"
    assert speed_column(df.with_columns(speedup=pl.Series([2.0, None, 1.0]))) == "tokens_per_s"


def test_z95_is_scipys_normal_quantile():
    from scipy import stats

    from analysis.intervals import Z95

    assert Z95 == float(stats.norm.ppf(0.975))


def test_the_closing_tables_modules_load_without_scipy_stats_or_matplotlib():
    """Every sweep prints its closing table (analysis.speedup); importing it must not pull in what only figures and
    claims use (about 3 s of each sweep's start when it did)."""
    import subprocess
    import sys

    from tests.conftest import REPO

    code = ("import sys, analysis.trials, analysis.reference, analysis.speedup\n"
            "print(sorted(m for m in ('scipy.stats', 'matplotlib') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr[-2000:]
