"""Pareto extraction, hypervolume and knee against hand-made cases and Optuna's best_trials."""
from __future__ import annotations

import math

import numpy as np
import optuna
import polars as pl
import pytest

from analysis import load_trials
from analysis.pareto import dominates, hypervolume, knee, knee_index, pareto_front, pareto_mask, with_pareto
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
