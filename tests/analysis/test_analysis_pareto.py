"""Pareto extraction, hypervolume and knee against hand-made cases and Optuna's best_trials."""
from __future__ import annotations

import math

import numpy as np
import optuna
import polars as pl
import pytest

from analysis import load_trials
from analysis.pareto import (
    dominates,
    hypervolume,
    hypervolume_interval,
    knee,
    knee_index,
    noisy_dominates,
    noisy_pareto_front,
    noisy_pareto_mask,
    pareto_front,
    pareto_mask,
    with_noisy_pareto,
    with_pareto,
)
from recdiff.errors import RecdiffError

INF = math.inf

# (points, directions, expected mask) — worked out by hand.
DOMINANCE_TABLE = [
    # maximize both: (3,1) and (1,3) trade off, (2,2) too; (1,1) is dominated by all of them.
    ([(3, 1), (1, 3), (2, 2), (1, 1)], ("maximize", "maximize"), [1, 1, 1, 0]),
    # duplicates of a front point are all on the front; a tie in one objective and worse in the other is not.
    ([(2, 2), (2, 2), (2, 1), (1, 2)], ("maximize", "maximize"), [1, 1, 0, 0]),
    # minimize both: same geometry mirrored.
    ([(3, 1), (1, 3), (2, 2), (3, 3)], ("minimize", "minimize"), [1, 1, 1, 0]),
    # mixed directions: maximize x, minimize y → (3,1) dominates everything else.
    ([(3, 1), (1, 3), (2, 2), (3, 1.5)], ("maximize", "minimize"), [1, 0, 0, 0]),
    # +inf in a maximised objective is best; equal infinities tie; -inf is worst.
    ([(INF, 0), (INF, 0), (5, 5), (-INF, 9), (4, 4)], ("maximize", "maximize"), [1, 1, 1, 1, 0]),
    ([(INF, 1), (INF, 0), (-INF, INF)], ("maximize", "maximize"), [1, 0, 1]),
    # NaN rows are never on the front and do not dominate.
    ([(np.nan, 10), (1, 1), (0, 2)], ("maximize", "maximize"), [0, 1, 1]),
    # single point; three objectives.
    ([(0, 0)], ("maximize", "maximize"), [1]),
    ([(1, 1, 1), (1, 1, 0), (0, 2, 0), (0, 1, 0)], ("maximize",) * 3, [1, 0, 1, 0]),
]


@pytest.mark.parametrize("points,directions,expected", DOMINANCE_TABLE)
def test_pareto_mask_matches_hand_table(points, directions, expected):
    assert pareto_mask(np.array(points, dtype=float), directions).tolist() == [bool(e) for e in expected]


def test_dominates_is_strict():
    assert dominates((2, 2), (2, 1))
    assert not dominates((2, 2), (2, 2))
    assert not dominates((3, 1), (1, 3))
    assert dominates((1, 1), (2, 1), ("minimize", "minimize"))


def test_empty_and_bad_directions():
    assert pareto_mask(np.empty((0, 2))).tolist() == []
    with pytest.raises(RecdiffError):
        pareto_mask(np.array([[1.0, 2.0]]), ("maximize",))
    with pytest.raises(RecdiffError):
        pareto_mask(np.array([[1.0, 2.0]]), ("max", "min"))


@pytest.mark.parametrize("directions", [("maximize", "maximize"), ("minimize", "maximize"), ("minimize", "minimize")])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_agrees_with_optuna_best_trials(directions, seed):
    rng = np.random.default_rng(seed)
    # Few distinct values → many ties and duplicates; a few infinities; some failed trials.
    values = rng.integers(0, 6, size=(60, 2)).astype(float)
    values[rng.choice(60, 4, replace=False), rng.integers(0, 2, 4)] = [INF, -INF, INF, -INF]
    study = optuna.create_study(directions=list(directions))
    with pytest.warns(optuna.exceptions.ExperimentalWarning):
        study.set_metric_names(["accuracy", "tokens_per_s"])
    for i, v in enumerate(values):
        failed = i % 13 == 5
        study.add_trial(optuna.trial.create_trial(
            values=None if failed else v.tolist(),
            state=optuna.trial.TrialState.FAIL if failed else optuna.trial.TrialState.COMPLETE))
    expected = sorted(t.number for t in study.best_trials)
    df = load_trials(study)
    got = with_pareto(df, directions=directions).filter(pl.col("pareto"))["number"].to_list()
    assert sorted(got) == expected
    assert sorted(pareto_front(df, directions=directions)["number"].to_list()) == expected


def test_agrees_with_optuna_on_journal_study(study_dir):
    df = load_trials(study_dir)
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(study_dir / "journal.log")))
    study = optuna.load_study(study_name="synthetic", storage=storage)
    expected = sorted(t.number for t in study.best_trials)
    assert sorted(pareto_front(df)["number"].to_list()) == expected


def test_grouped_fronts():
    df = pl.DataFrame({"beta": [0.0, 0.0, 0.0, 0.2, 0.2],
                       "accuracy": [0.5, 0.4, 0.3, 0.2, 0.1],
                       "tokens_per_s": [10.0, 20.0, 5.0, 1.0, 2.0]})
    front = pareto_front(df, by="beta")
    # β=0: (0.5,10) and (0.4,20) trade off, (0.3,5) is dominated; β=0.2: both points trade off.
    # Sorted by group, then by the first objective.
    assert front.select("beta", "accuracy").rows() == [(0.0, 0.4), (0.0, 0.5), (0.2, 0.1), (0.2, 0.2)]
    assert pareto_front(df)["accuracy"].to_list() == [0.4, 0.5]


def test_hypervolume_hand_computed():
    # Maximize both, reference (0, 0): staircase of (1,3), (2,2), (3,1):
    # union of rectangles [0,1]x[0,3] ∪ [0,2]x[0,2] ∪ [0,3]x[0,1] = 3 + 1*2 ... = 3 + 2 + 1 = 6.
    pts = np.array([[1, 3], [2, 2], [3, 1]], dtype=float)
    assert hypervolume(pts, (0, 0)) == pytest.approx(6.0)
    # Dominated and duplicate points add nothing; points worse than the reference are ignored.
    more = np.vstack([pts, [[1, 1], [2, 2], [-1, 5]]])
    assert hypervolume(more, (0, 0)) == pytest.approx(6.0)
    # Minimize both with reference (4, 4): (1,3),(3,1),(2,2) → 3*1 + ... = 1*... hand sum:
    # sorted by x: (1,3): (4-1)*(4-3)=3; (2,2): (4-2)*(3-2)=2; (3,1): (4-3)*(2-1)=1 → 6.
    assert hypervolume(pts, (4, 4), ("minimize", "minimize")) == pytest.approx(6.0)
    # Mixed directions: maximize accuracy, minimize time; ref (0, 10), one point (0.5, 4) → 0.5*6.
    assert hypervolume(np.array([[0.5, 4.0]]), (0.0, 10.0), ("maximize", "minimize")) == pytest.approx(3.0)
    assert hypervolume(np.empty((0, 2)), (0, 0)) == 0.0
    assert hypervolume(np.array([[INF, 1.0]]), (0, 0)) == INF


def test_hypervolume_3d_matches_box():
    pts = np.array([[1.0, 1.0, 1.0]])
    assert hypervolume(pts, (0, 0, 0), ("maximize",) * 3) == pytest.approx(1.0)
    pts = np.array([[2.0, 1.0, 1.0], [1.0, 2.0, 1.0]])  # 2 + 2 - 1 overlap
    assert hypervolume(pts, (0, 0, 0), ("maximize",) * 3) == pytest.approx(3.0)


def test_knee():
    # Convex front: (0,10), (1,4), (2,2), (10,0) minimised; after scaling, (2,2)→(0.2,0.2) is farthest
    # from the line x + y = 1 through the extremes.
    pts = np.array([[0, 10], [1, 4], [2, 2], [10, 0], [5, 5]], dtype=float)
    assert knee_index(pts, ("minimize", "minimize")) == 2
    df = pl.DataFrame({"number": [0, 1, 2], "state": ["COMPLETE"] * 3,
                       "accuracy": [0.9, 0.8, 0.1], "tokens_per_s": [10.0, 80.0, 100.0]})
    assert knee(df)["number"] == 1
    assert knee(df.clear()) is None


# ------------------------------------------------------------------------------------------- with noise
# (values, lows, highs, directions, expected mask), worked out by hand: a dominates b only when its whole interval is
# at least as good as b's whole interval in every objective and strictly better in one.
NOISY_TABLE = [
    # (2,2)±0.5 vs (1,1)±0.2: 1.5 > 1.2 on both axes → dominated
    ([(2, 2), (1, 1)], [(1.5, 1.5), (0.8, 0.8)], [(2.5, 2.5), (1.2, 1.2)], ("maximize", "maximize"), [1, 0]),
    # the same points, intervals overlapping on the first axis: a tie there, neither dominates
    ([(2, 2), (1, 1)], [(1.5, 1.5), (0.8, 0.8)], [(2.5, 2.5), (1.6, 1.2)], ("maximize", "maximize"), [1, 1]),
    # touching intervals count as at least as good (zero-width intervals give Optuna's rule)
    ([(2, 2), (2, 1)], [(2, 2), (2, 1)], [(2, 2), (2, 1)], ("maximize", "maximize"), [1, 0]),
    ([(2, 2), (2, 2)], [(2, 2), (2, 2)], [(2, 2), (2, 2)], ("maximize", "maximize"), [1, 1]),
    # minimised objectives: the low end is the best end
    ([(1, 1), (3, 3)], [(0.5, 0.5), (2.8, 2.8)], [(1.5, 1.5), (3.2, 3.2)], ("minimize", "minimize"), [1, 0]),
    ([(1, 1), (3, 3)], [(0.5, 0.5), (1.4, 2.8)], [(1.5, 1.5), (3.2, 3.2)], ("minimize", "minimize"), [1, 1]),
    # a chain: a beats b beyond the intervals, b ties c, a ties c → only b is off the front
    ([(3, 3), (2, 2), (2.2, 1.5)], [(2.9, 2.9), (1.9, 1.9), (1.5, 1.0)], [(3.1, 3.1), (2.1, 2.1), (3.0, 2.0)],
     ("maximize", "maximize"), [1, 0, 1]),
    # NaN rows are never on the front and dominate nothing
    ([(np.nan, 9), (1, 1)], [(np.nan, 9), (1, 1)], [(np.nan, 9), (1, 1)], ("maximize", "maximize"), [0, 1]),
]


@pytest.mark.parametrize("points,lows,highs,directions,expected", NOISY_TABLE)
def test_noisy_pareto_mask_matches_hand_table(points, lows, highs, directions, expected):
    mask = noisy_pareto_mask(np.array(points, float), np.array(lows, float), np.array(highs, float), directions)
    assert mask.tolist() == [bool(e) for e in expected]


def test_noisy_dominance_is_beyond_the_intervals():
    assert noisy_dominates((0.6, 110), (0.7, 120), (0.4, 90), (0.5, 100))      # better on both beyond the intervals
    assert not noisy_dominates((0.6, 110), (0.7, 120), (0.4, 90), (0.61, 100))  # accuracy intervals overlap: a tie
    assert not noisy_dominates((0.4, 90), (0.5, 100), (0.6, 110), (0.7, 120))


def test_zero_width_intervals_give_optunas_front():
    rng = np.random.default_rng(0)
    pts = rng.integers(0, 6, size=(40, 2)).astype(float)
    assert noisy_pareto_mask(pts, pts, pts).tolist() == pareto_mask(pts).tolist()


def test_noisy_front_of_a_trials_table():
    """Trial 1 is slower and less accurate than trial 0 by its measured values, but within its intervals: a tie.
    Trial 2 is beyond trial 0's intervals on both axes. Trial 3 has no tokens/s interval (recorded before
    intervals): its measured values count as exact."""
    df = pl.DataFrame({"number": [0, 1, 2, 3, 4], "state": ["COMPLETE"] * 4 + ["FAIL"],
                       "accuracy": [0.50, 0.48, 0.30, 0.20, None], "accuracy_lo": [0.45, 0.43, 0.28, 0.19, None],
                       "accuracy_hi": [0.55, 0.53, 0.32, 0.21, None],
                       "tokens_per_s": [100.0, 97.0, 50.0, 110.0, None],
                       "tokens_per_s_lo": [96.0, 93.0, 48.0, None, None],
                       "tokens_per_s_hi": [104.0, 101.0, 52.0, None, None]})
    assert with_noisy_pareto(df)["pareto"].to_list() == [True, True, False, True, False]
    assert noisy_pareto_front(df)["number"].to_list() == [3, 1, 0]   # sorted by accuracy
    assert pareto_front(df)["number"].to_list() == [3, 0]             # without noise trial 1 is dominated


def test_hypervolume_interval_uses_the_ends_of_the_intervals():
    df = pl.DataFrame({"accuracy": [0.5], "accuracy_lo": [0.4], "accuracy_hi": [0.6], "tokens_per_s": [100.0],
                       "tokens_per_s_lo": [90.0], "tokens_per_s_hi": [110.0]})
    assert hypervolume_interval(df, (0, 0)) == pytest.approx((50.0, 36.0, 66.0))
    hv, lo, hi = hypervolume_interval(df.drop("tokens_per_s_lo", "tokens_per_s_hi"), (0, 0))
    assert hv == pytest.approx(50.0) and (lo, hi) == (-INF, INF)     # no tokens/s interval: unknown precision
