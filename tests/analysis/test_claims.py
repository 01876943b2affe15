"""issue 14: every verdict of the paper report is computed from the data. Each claim gets a hand-made study where it
holds ("agrees") and one where it fails ("disagrees"), and n/a where the data cannot test it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from analysis import claims
from analysis.claims import CLAIMS


def trials(rows: list[dict]) -> pl.DataFrame:
    """A trials table as `load_trials` gives it: COMPLETE rows, accuracy intervals, a number per row."""
    full = [{"number": i, "state": "COMPLETE", "sampler": "diffusion", "accuracy_low": None, "accuracy_high": None,
             **r} for i, r in enumerate(rows)]
    return pl.DataFrame(full, infer_schema_length=None)


def static(r: int, acc: float, tps: float, **kw) -> dict:
    return {"sampler": "static", "r": r, "accuracy": acc, "tokens_per_s": tps, **kw}


def diff(acc: float, tps: float, **params) -> dict:
    return {"sampler": "diffusion", "accuracy": acc, "tokens_per_s": tps, **params}


def status(judge, rows: list[dict]) -> str:
    return judge(trials(rows)).status


# ----------------------------------------------------------------------------------------- study claims
def test_pareto_noise():
    ref = static(32, 0.50, 20.0)
    good = [ref] + [diff(0.45 + 0.01 * r, 100 / r, r_inner=r, beta=0.0) for r in (1, 2, 4)] + \
        [diff(0.49 + 0.01 * r, 110 / r, r_inner=r, beta=0.2) for r in (1, 2, 4)]
    bad = [ref] + [diff(0.45 + 0.01 * r, 100 / r, r_inner=r, beta=0.0) for r in (1, 2, 4)] + \
        [diff(0.30 + 0.01 * r, 60 / r, r_inner=r, beta=0.2) for r in (1, 2, 4)]
    assert status(claims.noise_dominates, good) == "agrees"
    assert status(claims.noise_dominates, bad) == "disagrees"      # β=0.2 dominated, and the fast end loses 5+ points
    assert status(claims.noise_per_r_inner, good) == "agrees"
    assert status(claims.noise_per_r_inner, bad) == "disagrees"
    assert status(claims.noise_dominates, [ref, diff(0.4, 10, r_inner=4, beta=0.0)]) == "n/a"


def test_r_inner_trade():
    good = [diff(0.3 + 0.05 * r, 200 / r, r_inner=r, beta=b) for r in (1, 2, 4, 8) for b in (0.0, 0.2)]
    flat = [diff(0.5 - 0.01 * r, 20 + r, r_inner=r, beta=b) for r in (1, 2, 4, 8) for b in (0.0, 0.2)]
    assert status(claims.r_inner_trade, good) == "agrees"
    v = claims.r_inner_trade(trials(flat))
    assert v.status == "disagrees" and "ρ = -1.00" in v.evidence.replace("−", "-")


def test_epsilon_trade():
    good = [diff(0.5 - e, 100 + 500 * e, epsilon=e) for e in (0.003, 0.03, 0.3)]
    bad = [diff(0.4 + e, 200 - 500 * e, epsilon=e) for e in (0.003, 0.03, 0.3)]
    assert status(claims.epsilon_trade, good) == "agrees"
    assert status(claims.epsilon_trade, bad) == "disagrees"


def test_small_momentum():
    good = [diff(a, 100, eta=e) for e, a in ((0.0, 0.40), (0.1, 0.45), (0.5, 0.41), (0.9, 0.30))]
    bad = [diff(a, 100, eta=e) for e, a in ((0.0, 0.45), (0.1, 0.40), (0.5, 0.41), (0.9, 0.50))]
    assert status(claims.small_momentum, good) == "agrees"
    assert status(claims.small_momentum, bad) == "disagrees"
    assert status(claims.small_momentum, [diff(0.4, 1, eta=0.0), diff(0.5, 1, eta=0.9)]) == "n/a"


def test_no_noise_at_r4():
    rows = lambda accs: [diff(a, 100, r_inner=4, beta=b, beta_schedule=s)
                         for b, a in zip((0.0, 0.2, 0.5), accs) for s in ("linear", "constant")]
    assert status(claims.no_noise_at_r4, rows((0.45, 0.44, 0.40))) == "agrees"
    assert status(claims.no_noise_at_r4, rows((0.40, 0.46, 0.41))) == "disagrees"


def test_wavefront_growth():
    good = [diff(0.4, t, wavefront=w) for w, t in ((8, 50), (16, 70), (32, 90), (64, 120), (128, 125), (256, 124))]
    early = [diff(0.4, t, wavefront=w) for w, t in ((8, 100), (16, 101), (64, 99), (128, 100), (256, 98))]
    assert status(claims.wavefront_growth, good) == "agrees"
    assert status(claims.wavefront_growth, early) == "disagrees"   # flat from W=8 on


def test_headway_no_gain():
    assert status(claims.headway_no_gain, [diff(0.4, t, headway=h) for h, t in ((1, 100), (2, 104), (4, 90))]) \
        == "agrees"
    assert status(claims.headway_no_gain, [diff(0.4, t, headway=h) for h, t in ((1, 100), (2, 150), (4, 90))]) \
        == "disagrees"


def test_init_scale_minor():
    assert status(claims.minor_effect_init_scale,
                  [diff(0.40 + 0.005 * i, 100 + i, init_scale=a) for i, a in enumerate((0.0, 0.5, 1.0))]) == "agrees"
    assert status(claims.minor_effect_init_scale,
                  [diff(0.40 + 0.05 * i, 100 + 30 * i, init_scale=a) for i, a in enumerate((0.0, 0.5, 1.0))]) \
        == "disagrees"


def test_continuous_compute():
    rows = lambda on, off: [diff(a, t, r_inner=r, continuous_compute=c) for r in (1, 4)
                            for c, (a, t) in ((True, on), (False, off))]
    assert status(claims.continuous_compute_worse, rows((0.30, 80), (0.40, 100))) == "agrees"
    assert status(claims.continuous_compute_worse, rows((0.45, 110), (0.40, 100))) == "disagrees"


def test_kv_sharing():
    good = [static(r, 0.40, 50, kv_cache="shared", kv_cache_bytes=1000) for r in (4, 32)] + \
        [static(r, 0.405, 48, kv_cache="per_step", kv_cache_bytes=500 + 500 * r) for r in (4, 32)]
    bad = [static(r, 0.40, 50, kv_cache="shared", kv_cache_bytes=100 * r) for r in (4, 32)] + \
        [static(r, 0.45, 48, kv_cache="per_step", kv_cache_bytes=1000) for r in (4, 32)]
    assert status(claims.kv_sharing_free, good) == "agrees"
    assert status(claims.kv_sharing_free, bad) == "disagrees"


def test_table1_speedup():
    ref = static(32, 0.50, 20.0, kv_cache="shared", init_scale=0.0)
    assert status(claims.diffusion_speedup, [ref, diff(0.495, 90.0, r_inner=4, beta=0.0)]) == "agrees"
    v = claims.diffusion_speedup(trials([ref, diff(0.40, 40.0, r_inner=4, beta=0.0)]))
    assert v.status == "disagrees" and "2.00x" in v.evidence and "-10.0" in v.evidence
    assert status(claims.diffusion_speedup, [diff(0.4, 40.0, r_inner=4)]) == "n/a"   # no reference


# ----------------------------------------------------------------------------------------- trace claims
def write_trace(path: Path, tokens: np.ndarray, frozen: list[int], prompt_len: int,
                delta: np.ndarray | None = None) -> str:
    if delta is None:
        delta = np.where(tokens >= 0, 0.1, np.nan)
    np.savez(path, tokens=tokens.astype(np.int32), frozen=np.array(frozen, np.int32), prompt_len=np.int32(prompt_len),
             counter=np.zeros_like(tokens, np.int32), delta=delta.astype(np.float16))
    return str(path)


def staircase(n: int, settle: bool) -> tuple[np.ndarray, list[int]]:
    """1 prompt token, n generated positions, one new position per step; each position is first written as 9, then
    takes its final value 100+p: one step before freezing (settle) or in the very step it freezes (not)."""
    steps = n + 3
    tokens = np.full((steps, n + 1), -1)
    tokens[:, 0] = 1
    frozen = []
    for s in range(steps):
        for p in range(1, min(s + 1, n) + 1):
            age = s - (p - 1)
            tokens[s, p] = 100 + p if age >= (1 if settle else 2) else 9
        frozen.append(1 + max(0, min(n, s - 1)))   # position p freezes at step p + 1 (age 2)
    return tokens, frozen


def traced(tmp_path: Path, settle: bool, r_inner: int = 4, n: int = 6, name: str = "t") -> dict:
    tokens, frozen = staircase(n, settle)
    return diff(0.4, 100, r_inner=r_inner, trace_paths=[write_trace(tmp_path / f"{name}.npz", tokens, frozen, 1)])


def test_tokens_settle(tmp_path):
    assert status(claims.tokens_settle, [traced(tmp_path, settle=True)]) == "agrees"
    assert status(claims.tokens_settle, [traced(tmp_path, settle=False)]) == "disagrees"
    assert status(claims.tokens_settle, [diff(0.4, 100, trace_paths=[])]) == "n/a"


def test_delta_shrinks(tmp_path):
    tokens, frozen = staircase(6, True)
    first = np.array([0] + [p - 1 for p in range(1, 7)])
    age = np.arange(tokens.shape[0])[:, None] - first[None, :]
    for sign, expected in ((-1, "agrees"), (+1, "disagrees")):
        delta = np.where(tokens >= 0, 2.0 ** (sign * age), np.nan)
        delta[:, 0] = np.nan
        path = write_trace(tmp_path / f"d{sign}.npz", tokens, frozen, 1, delta)
        assert status(claims.delta_shrinks, [diff(0.4, 100, trace_paths=[path])]) == expected


def test_small_r_inner_stalls(tmp_path):
    quick, slow = staircase(6, True), staircase(6, True)
    slow_tokens = np.repeat(slow[0], 3, axis=0)                     # three times the steps for the same tokens
    slow_path = write_trace(tmp_path / "slow.npz", slow_tokens, list(np.repeat(slow[1], 3)), 1)
    quick_path = write_trace(tmp_path / "quick.npz", *quick, 1)
    rows = [diff(0.4, 100, r_inner=4, trace_paths=[quick_path]), diff(0.3, 100, r_inner=1, trace_paths=[slow_path])]
    assert status(claims.small_r_inner_stalls, rows) == "agrees"
    rows = [diff(0.4, 100, r_inner=4, trace_paths=[slow_path]), diff(0.3, 100, r_inner=1, trace_paths=[quick_path])]
    assert status(claims.small_r_inner_stalls, rows) == "disagrees"


# ----------------------------------------------------------------------------------------- the table
def test_every_claim_names_a_recipe_and_a_figure_the_report_draws():
    recipes = {p.stem for p in (Path(__file__).resolve().parents[2] / "sweeps").glob("*.yaml")}
    assert {c.recipe for c in CLAIMS} <= recipes
    import inspect

    from analysis import report
    drawn = inspect.getsource(report.plan_figures)
    for c in CLAIMS:
        assert c.figure == "table1" or c.figure.split("_")[0] in drawn, c.figure


def test_judge_all_missing_recipe_is_na():
    out = claims.judge_all({}, CLAIMS[:2])
    assert [v.status for _, v in out] == ["n/a", "n/a"]
    assert "no trials of recipe" in out[0][1].evidence


@pytest.mark.parametrize("checks,expected", [([True, True], "agrees"), ([False, False], "disagrees"),
                                             ([True, False], "partly"), ([], "n/a")])
def test_status_levels(checks, expected):
    assert claims.Verdict([claims.Check("x", c) for c in checks]).status == expected
