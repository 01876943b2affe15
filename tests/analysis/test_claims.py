"""issues 14, 32: every verdict of the paper report is computed from the data, with its intervals. Each of the 16
judges gets a hand-made study where the claim holds ("agrees"), one where it fails ("disagrees"), one whose intervals
straddle the threshold ("inconclusive") and one the data cannot test ("n/a"); the accuracy checks are inconclusive,
with the reason, when every configuration sits at the same accuracy within its interval (the embedded model)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from analysis import claims, judges, verdicts
from analysis.claims import CLAIMS

FLAT = "same accuracy within its interval"


def trials(rows: list[dict]) -> pl.DataFrame:
    """A trials table as `load_trials` gives it: COMPLETE rows, a number per row."""
    full = [{"number": i, "state": "COMPLETE", "sampler": "diffusion", **r} for i, r in enumerate(rows)]
    return pl.DataFrame(full, infer_schema_length=None)


def measured(sampler: str, acc: float, tps: float, half: float = 0.005, spread: float = 0.01,
             speedup: float | None = None, sp_spread: float = 0.02, **params) -> dict:
    """A trial: accuracy ± `half`, tokens/s ± `spread` (relative), a paired speed-up ± `sp_spread` when given.
    `half=None` / `spread=None`: recorded without that interval (a study from before intervals)."""
    row = {"sampler": sampler, "accuracy": acc, "tokens_per_s": tps, **params}
    if half is not None:
        row.update(accuracy_lo=max(acc - half, 0.0), accuracy_hi=min(acc + half, 1.0))
    if spread is not None:
        row.update(tokens_per_s_lo=tps * (1 - spread), tokens_per_s_hi=tps * (1 + spread))
    if speedup is not None:
        row.update(speedup=speedup, speedup_lo=speedup * (1 - sp_spread), speedup_hi=speedup * (1 + sp_spread))
    return row


def static(r: int, acc: float, tps: float, **kw) -> dict:
    return measured("static", acc, tps, r=r, **kw)


def diff(acc: float, tps: float, **kw) -> dict:
    return measured("diffusion", acc, tps, **kw)


def embedded(tps: float, **kw) -> dict:
    """The embedded model: every answer right, 40 problems (Wilson interval [0.912, 1])."""
    return diff(1.0, tps, half=0.088, **kw)


def verdict(judge, rows: list[dict]) -> verdicts.Verdict:
    return judge(trials(rows))


def status(judge, rows: list[dict]) -> str:
    return verdict(judge, rows).status


# ----------------------------------------------------------------------------------------- study claims
def _pareto_rows(noisy: tuple[float, float], half: float = 0.005) -> list[dict]:
    acc, speed = noisy
    return [static(32, 0.50, 20.0, half=half)] + \
        [diff(0.45 + 0.01 * r, 100 / r, r_inner=r, beta=0.0, half=half) for r in (1, 2, 4)] + \
        [diff(acc + 0.01 * r, speed / r, r_inner=r, beta=0.2, half=half) for r in (1, 2, 4)]


def test_pareto_noise():
    assert status(judges.noise_dominates, _pareto_rows((0.49, 110))) == "agrees"
    # β=0.2 dominated, and the fast end loses 5+ points
    assert status(judges.noise_dominates, _pareto_rows((0.30, 60))) == "disagrees"
    v = verdict(judges.noise_dominates, _pareto_rows((0.49, 110), half=0.1))   # ±10 points: the hypervolumes overlap
    assert v.status == "inconclusive" and "[" in v.evidence and "?" in v.evidence
    assert status(judges.noise_dominates, [static(32, 0.5, 20.0), diff(0.4, 10, r_inner=4, beta=0.0)]) == "n/a"
    v = verdict(judges.noise_dominates, [embedded(100 / r * (1.1 if b else 1.0), r_inner=r, beta=b)
                                         for r in (1, 2, 4) for b in (0.0, 0.2)])
    assert v.status == "inconclusive" and FLAT in v.evidence


def test_noise_per_r_inner():
    assert status(judges.noise_per_r_inner, _pareto_rows((0.49, 110))) == "agrees"
    assert status(judges.noise_per_r_inner, _pareto_rows((0.30, 60))) == "disagrees"
    # β=0.2 slightly faster (3%) and as accurate, within ±10 points and ±5%: tied at every r′
    v = verdict(judges.noise_per_r_inner, [diff(0.45, 100 / r * (1.03 if b else 1.0), r_inner=r, beta=b, half=0.1,
                                                spread=0.05) for r in (1, 2, 4) for b in (0.0, 0.2)])
    assert v.status == "inconclusive" and "tied within the intervals at 3" in v.evidence
    assert status(judges.noise_per_r_inner, [diff(0.4, 10, r_inner=r, beta=0.0) for r in (1, 2)]) == "n/a"


def test_r_inner_trade():
    good = [diff(0.3 + 0.05 * r, 200 / r, r_inner=r, beta=b) for r in (1, 2, 4, 8) for b in (0.0, 0.2)]
    flat = [diff(0.5 - 0.01 * r, 20 + r, r_inner=r, beta=b) for r in (1, 2, 4, 8) for b in (0.0, 0.2)]
    assert status(judges.r_inner_trade, good) == "agrees"
    v = verdict(judges.r_inner_trade, flat)
    assert v.status == "disagrees" and "ρ = -1.00 [-1.00, -1.00]" in v.evidence.replace("−", "-")
    # accuracy within ±5 points, 1 point apart per r′: ρ's interval straddles +0.5
    v = verdict(judges.r_inner_trade, [diff(0.40 + 0.01 * i, 200 / r, r_inner=r, half=0.05)
                                       for i, r in enumerate((1, 2, 4, 8))])
    assert v.status == "inconclusive" and v.checks[0].passed is None and v.checks[1].passed is True
    assert status(judges.r_inner_trade, [diff(0.4, 10, r_inner=4, beta=b) for b in (0.0, 0.2)]) == "n/a"


def test_embedded_accuracy_is_inconclusive_not_a_disagreement():
    """Every r′ answers everything (1.000, interval [0.912, 1]): accuracy cannot rise, and that is no evidence
    against the paper; the throughput check still decides."""
    v = verdict(judges.r_inner_trade, [embedded(200 / r, r_inner=r) for r in (1, 2, 4, 8)])
    assert [c.passed for c in v.checks] == [None, True] and v.status == "inconclusive"
    assert FLAT in v.checks[0].text and "91.2–100.0%" in v.checks[0].text
    v = verdict(judges.epsilon_trade, [embedded(100 + 500 * e, epsilon=e) for e in (0.003, 0.03, 0.3)])
    assert v.status == "inconclusive" and FLAT in v.evidence


def test_epsilon_trade():
    good = [diff(0.5 - e, 100 + 500 * e, epsilon=e) for e in (0.003, 0.03, 0.3)]
    bad = [diff(0.4 + e, 200 - 500 * e, epsilon=e) for e in (0.003, 0.03, 0.3)]
    assert status(judges.epsilon_trade, good) == "agrees"
    assert status(judges.epsilon_trade, bad) == "disagrees"
    wide = [diff(0.5 - e, 100 + 50 * e, epsilon=e, half=0.2, spread=0.2) for e in (0.003, 0.03, 0.3)]
    assert status(judges.epsilon_trade, wide) == "inconclusive"
    assert status(judges.epsilon_trade, [diff(0.4, 100, epsilon=0.03)] * 2) == "n/a"


def test_speed_checks_use_the_paired_speedup_and_need_an_interval():
    # tokens/s says faster with ε (a load that eased during the sweep), the paired speed-up says slower: the paired
    # one decides
    rows = [diff(0.5 - e, 100 + 500 * e, epsilon=e, speedup=4.0 - e) for e in (0.003, 0.03, 0.3)]
    v = verdict(judges.epsilon_trade, rows)
    assert v.checks[0].passed is False and v.checks[0].text.startswith("paired speed-up rises with ε")
    # a study recorded before paired timing: tokens/s without an interval leaves the speed check inconclusive
    v = verdict(judges.epsilon_trade, [diff(0.5 - e, 100 + 500 * e, epsilon=e, spread=None) for e in (0.003, 0.3)])
    assert v.checks[0].passed is None and "no interval recorded" in v.checks[0].text


def test_small_momentum():
    good = [diff(a, 100, eta=e) for e, a in ((0.0, 0.40), (0.1, 0.45), (0.5, 0.41), (0.9, 0.30))]
    bad = [diff(a, 100, eta=e) for e, a in ((0.0, 0.45), (0.1, 0.40), (0.5, 0.41), (0.9, 0.50))]
    assert status(judges.small_momentum, good) == "agrees"
    assert status(judges.small_momentum, bad) == "disagrees"
    v = verdict(judges.small_momentum, [diff(a, 100, eta=e, half=0.1) for e, a in ((0.0, 0.40), (0.1, 0.45))])
    assert v.status == "inconclusive" and "+5.0 [" in v.evidence
    assert status(judges.small_momentum, [diff(0.4, 1, eta=0.0), diff(0.5, 1, eta=0.9)]) == "n/a"


def test_no_noise_at_r4():
    rows = lambda accs, half=0.005: [diff(a, 100, r_inner=4, beta=b, beta_schedule=s, half=half)
                                     for b, a in zip((0.0, 0.2, 0.5), accs) for s in ("linear", "constant")]
    assert status(judges.no_noise_at_r4, rows((0.45, 0.44, 0.40))) == "agrees"
    assert status(judges.no_noise_at_r4, rows((0.40, 0.46, 0.41))) == "disagrees"
    assert status(judges.no_noise_at_r4, rows((0.45, 0.44, 0.40), half=0.05)) == "inconclusive"
    assert status(judges.no_noise_at_r4, [diff(0.4, 1, r_inner=4, beta=b) for b in (0.2, 0.5)]) == "n/a"


def test_wavefront_growth():
    good = [diff(0.4, t, wavefront=w) for w, t in ((8, 50), (16, 70), (32, 90), (64, 120), (128, 125), (256, 124))]
    early = [diff(0.4, t, wavefront=w) for w, t in ((8, 100), (16, 101), (64, 99), (128, 100), (256, 98))]
    assert status(judges.wavefront_growth, good) == "agrees"
    assert status(judges.wavefront_growth, early) == "disagrees"   # flat from W=8 on
    # ±15%: the maximum could be reached anywhere from W=32 on
    v = verdict(judges.wavefront_growth, [{**r, "tokens_per_s_lo": 0.85 * r["tokens_per_s"],
                                           "tokens_per_s_hi": 1.15 * r["tokens_per_s"]} for r in good])
    assert v.status == "inconclusive" and "W in [32, 256] within the intervals" in v.evidence
    assert status(judges.wavefront_growth, [diff(0.4, 100, wavefront=64)]) == "n/a"


def test_headway_no_gain():
    rows = lambda t2, spread=0.01: [diff(0.4, t, headway=h, spread=spread) for h, t in ((1, 100), (2, t2), (4, 90))]
    assert status(judges.headway_no_gain, rows(104)) == "agrees"
    assert status(judges.headway_no_gain, rows(150)) == "disagrees"
    v = verdict(judges.headway_no_gain, rows(108, spread=0.05))      # 1.08x, interval about [0.97, 1.20]
    assert v.status == "inconclusive" and "1.08x [" in v.evidence and "needs ≤ 1.10x" in v.evidence
    assert status(judges.headway_no_gain, [diff(0.4, t, headway=h) for h, t in ((2, 100), (4, 90))]) == "n/a"


def test_init_scale_minor():
    assert status(judges.minor_effect_init_scale,
                  [diff(0.40 + 0.005 * i, 100 + i, init_scale=a, half=0.002) for i, a in enumerate((0.0, 0.5, 1.0))]) \
        == "agrees"
    assert status(judges.minor_effect_init_scale,
                  [diff(0.40 + 0.05 * i, 100 + 30 * i, init_scale=a) for i, a in enumerate((0.0, 0.5, 1.0))]) \
        == "disagrees"
    v = verdict(judges.minor_effect_init_scale, [embedded(100 + i, init_scale=a) for i, a in enumerate((0.0, 1.0))])
    assert v.status == "inconclusive" and FLAT in v.checks[0].text and v.checks[1].passed is True
    assert status(judges.minor_effect_init_scale, [diff(0.4, 100, init_scale=1.0)]) == "n/a"


def test_continuous_compute():
    rows = lambda on, off, half=0.005: [diff(a, t, r_inner=r, continuous_compute=c, half=half) for r in (1, 4)
                                        for c, (a, t) in ((True, on), (False, off))]
    assert status(judges.continuous_compute_worse, rows((0.30, 80), (0.40, 100))) == "agrees"
    assert status(judges.continuous_compute_worse, rows((0.45, 110), (0.40, 100))) == "disagrees"
    assert status(judges.continuous_compute_worse, rows((0.39, 99), (0.40, 100), half=0.1)) == "inconclusive"
    assert status(judges.continuous_compute_worse, [diff(0.4, 100, r_inner=4, continuous_compute=False)]) == "n/a"


def test_kv_sharing():
    good = [static(r, 0.40, 50, kv_cache="shared", kv_cache_bytes=1000, half=0.002) for r in (4, 32)] + \
        [static(r, 0.405, 48, kv_cache="per_step", kv_cache_bytes=500 + 500 * r, half=0.002) for r in (4, 32)]
    bad = [static(r, 0.40, 50, kv_cache="shared", kv_cache_bytes=100 * r) for r in (4, 32)] + \
        [static(r, 0.45, 48, kv_cache="per_step", kv_cache_bytes=1000) for r in (4, 32)]
    assert status(judges.kv_sharing_free, good) == "agrees"
    assert status(judges.kv_sharing_free, bad) == "disagrees"
    v = verdict(judges.kv_sharing_free, [{**r, "accuracy_lo": 0.3, "accuracy_hi": 0.5} for r in good])
    assert v.status == "inconclusive" and FLAT in v.checks[0].text
    assert status(judges.kv_sharing_free, [r for r in good if r["kv_cache"] == "shared"]) == "n/a"


def test_table1_speedup():
    ref = static(32, 0.50, 20.0, kv_cache="shared", init_scale=0.0, speedup=1.0, half=0.002)
    assert status(judges.diffusion_speedup, [ref, diff(0.495, 90.0, r_inner=4, speedup=4.5, half=0.002)]) == "agrees"
    v = verdict(judges.diffusion_speedup, [ref, diff(0.40, 40.0, r_inner=4, beta=0.0, speedup=2.0)])
    assert v.status == "disagrees" and "2.00x [1.96, 2.04]" in v.evidence and "-10.0 [" in v.evidence
    # 4.1x with an interval reaching below 4: inconclusive, and the evidence says how far it reaches
    v = verdict(judges.diffusion_speedup, [ref, diff(0.495, 90.0, r_inner=4, speedup=4.1, sp_spread=0.1, half=0.002)])
    assert v.status == "inconclusive" and v.checks[0].passed is None and "[3.69, 4.51]" in v.checks[0].text
    # recorded before paired timing: the speed-up is unknown, not 90 / 20 = 4.5x
    v = verdict(judges.diffusion_speedup, [static(32, 0.50, 20.0, half=0.002), diff(0.495, 90.0, r_inner=4,
                                                                                     half=0.002)])
    assert v.checks[0].passed is None and "speed-up unknown" in v.checks[0].text and "4.5" not in v.checks[0].text
    v = verdict(judges.diffusion_speedup, [static(32, 1.0, 20.0, half=0.088, speedup=1.0),
                                           embedded(90.0, r_inner=4, speedup=4.5)])
    assert [c.passed for c in v.checks] == [True, None] and FLAT in v.checks[1].text
    assert status(judges.diffusion_speedup, [diff(0.4, 40.0, r_inner=4, speedup=2.0)]) == "n/a"   # no reference


def answers(tmp_path: Path, name: str, outputs: list[str]) -> str:
    """A per-sample table: problem i answered outputs[i]."""
    path = tmp_path / f"{name}.parquet"
    pl.DataFrame({"problem_id": [str(i) for i in range(len(outputs))], "output": outputs}).write_parquet(path)
    return str(path)


def test_diffusion_against_loopspec(tmp_path):
    """The diffusion defaults against LoopSpec (r=32, r_draft=4): the ratio of their paired speed-ups > 1, their
    accuracy within 1 point, and LoopSpec's answers static AR r=32's (lossless)."""
    same = answers(tmp_path, "ref", ["4", "7", "9"])
    ref = static(32, 0.50, 20.0, kv_cache="shared", init_scale=0.0, speedup=1.0, half=0.002, samples_path=same)

    def spec(speedup: float, acc: float = 0.50, outputs: str | None = same, **kw) -> dict:
        return measured("loopspec", acc, 40.0, r=32, r_draft=4, kv_cache="per_step", init_scale=0.0, speedup=speedup,
                        half=0.002, samples_path=outputs, **kw)

    def defaults(speedup: float, acc: float = 0.495, **kw) -> dict:
        return diff(acc, 90.0, **{"r_inner": 4, "beta": 0.0, **kw}, speedup=speedup, half=0.002)

    v = verdict(judges.diffusion_vs_loopspec, [ref, spec(2.0), defaults(4.0)])
    assert v.status == "agrees", v.evidence
    # 4.0 / 2.0 with ±2% on each: MOVER on the logarithms, exp(±√2·ln 1.02) → [1.94, 2.06]
    assert "run 2.00x [1.94, 2.06] LoopSpec's speed" in v.checks[0].text
    assert "-0.5 [" in v.checks[1].text and "all 3 problems" in v.checks[2].text
    # slower than LoopSpec, or less accurate beyond the intervals: disagrees; a ratio straddling 1: inconclusive
    assert [c.passed for c in verdict(judges.diffusion_vs_loopspec, [ref, spec(2.0), defaults(1.5)]).checks] == \
        [False, True, True]
    v = verdict(judges.diffusion_vs_loopspec, [ref, spec(2.0, sp_spread=0.2), defaults(2.1, sp_spread=0.2)])
    assert v.status == "inconclusive" and v.checks[0].passed is None
    assert verdict(judges.diffusion_vs_loopspec, [ref, spec(2.0), defaults(4.0, acc=0.40)]).checks[1].passed is False
    # a diffusion trial at other settings, or a LoopSpec with a second readout, is not the comparison's
    rows = [ref, spec(2.0, r_draft2=16), defaults(4.0, r_inner=2)]
    assert verdict(judges.diffusion_vs_loopspec, rows).status == "n/a"

    # LoopSpec answering otherwise than static AR r=32 (sampled, or another cache): judged by its accuracy, ±1 point
    other = answers(tmp_path, "other", ["4", "8", "9"])
    v = verdict(judges.diffusion_vs_loopspec, [ref, spec(2.0, outputs=other), defaults(4.0)])
    assert v.checks[2].passed is True and "differ from static AR (r=32)'s on 1 of 3 problems" in v.checks[2].text
    v = verdict(judges.diffusion_vs_loopspec, [ref, spec(2.0, acc=0.45, outputs=other), defaults(4.0, acc=0.45)])
    assert v.checks[2].passed is False and "-5.0 [" in v.checks[2].text
    v = verdict(judges.diffusion_vs_loopspec, [{**ref, "accuracy_lo": 0.3, "accuracy_hi": 0.7},
                                               spec(2.0, outputs=None), defaults(4.0)])
    assert v.checks[2].passed is None and "no per-sample tables" in v.checks[2].text
    assert status(judges.diffusion_vs_loopspec, [ref, spec(2.0)]) == "n/a"          # no diffusion defaults
    # recorded before paired timing: no verdict on speed
    v = verdict(judges.diffusion_vs_loopspec, [static(32, 0.5, 20.0, half=0.002), spec(2.0) | {"speedup": None},
                                               defaults(4.0) | {"speedup": None}])
    assert v.checks[0].passed is None and "speed-up unknown" in v.checks[0].text


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


def traced(tmp_path: Path, settle: bool, r_inner: int = 4, n: int = 40, name: str = "t") -> dict:
    tokens, frozen = staircase(n, settle)
    return diff(0.4, 100, r_inner=r_inner, trace_paths=[write_trace(tmp_path / f"{name}.npz", tokens, frozen, 1)])


def test_tokens_settle(tmp_path):
    # 40 positions, all settled: Wilson's lower bound 40/(40 + 1.96²) = 0.912 clears 90%
    assert status(judges.tokens_settle, [traced(tmp_path, settle=True)]) == "agrees"
    assert status(judges.tokens_settle, [traced(tmp_path, settle=False)]) == "disagrees"
    v = verdict(judges.tokens_settle, [traced(tmp_path, settle=True, n=6)])   # 6 of 6: lower bound 0.61
    assert v.status == "inconclusive" and [c.passed for c in v.checks] == [True, None]
    assert status(judges.tokens_settle, [diff(0.4, 100, trace_paths=[])]) == "n/a"


def _delta_trace(tmp_path: Path, name: str, by_age) -> str:
    tokens, frozen = staircase(6, True)
    first = np.array([0] + [p - 1 for p in range(1, 7)])
    age = np.arange(tokens.shape[0])[:, None] - first[None, :]
    delta = np.where(tokens >= 0, by_age(np.clip(age, 0, None)), np.nan)
    delta[:, 0] = np.nan
    return write_trace(tmp_path / f"{name}.npz", tokens, frozen, 1, delta)


def test_delta_shrinks(tmp_path):
    for sign, expected in ((-1, "agrees"), (+1, "disagrees")):
        path = _delta_trace(tmp_path, f"d{sign}", lambda a: 2.0 ** (sign * a))
        assert status(judges.delta_shrinks, [diff(0.4, 100, trace_paths=[path])]) == expected
    # median δ by age 0..7 = 8, 6, 7, 3, 5, 4, 1, 2 (the oldest age, 8, is cut at the 90% quantile): Σd² = 158, so
    # ρ = 1 − 6·158 / (8·63) = −0.88; Fisher's z: atanh(−0.881) ± 1.96·√(1.06/5) → [−0.98, −0.44], straddling −0.5
    order = np.array([8, 6, 7, 3, 5, 4, 1, 2, 0], dtype=float)
    path = _delta_trace(tmp_path, "mixed", lambda a: order[np.clip(a, 0, 8)])
    v = verdict(judges.delta_shrinks, [diff(0.4, 100, trace_paths=[path])])
    assert v.status == "inconclusive" and "ρ = −0.88 [−0.98, −0.44] over 8 ages" in v.evidence.replace("-", "−")
    assert status(judges.delta_shrinks, [diff(0.4, 100, trace_paths=[])]) == "n/a"


def test_small_r_inner_stalls(tmp_path):
    def trace(name: str, n: int, repeat: int) -> str:
        tokens, frozen = staircase(n, True)
        return write_trace(tmp_path / f"{name}.npz", np.repeat(tokens, repeat, axis=0), list(np.repeat(frozen, repeat)),
                           1)
    quick = [trace("q6", 6, 1), trace("q7", 7, 1)]      # 9/6 = 1.50 and 10/7 = 1.43 steps per token
    slow = [trace("s6", 6, 3), trace("s7", 7, 3)]       # three times the steps for the same tokens
    rows = [diff(0.4, 100, r_inner=4, trace_paths=quick), diff(0.3, 100, r_inner=1, trace_paths=slow)]
    assert status(judges.small_r_inner_stalls, rows) == "agrees"
    rows = [diff(0.4, 100, r_inner=4, trace_paths=slow), diff(0.3, 100, r_inner=1, trace_paths=quick)]
    assert status(judges.small_r_inner_stalls, rows) == "disagrees"
    # one trace per r′: no interval, however large the difference looks
    rows = [diff(0.4, 100, r_inner=4, trace_paths=quick[:1]), diff(0.3, 100, r_inner=1, trace_paths=slow[:1])]
    v = verdict(judges.small_r_inner_stalls, rows)
    assert v.status == "inconclusive" and "no interval recorded" in v.evidence
    assert status(judges.small_r_inner_stalls, [diff(0.4, 100, r_inner=4, trace_paths=quick)]) == "n/a"


# ----------------------------------------------------------------------------------------- the table
# Written out here, not derived from CLAIMS: the figure each claim is drawn in, the recipe it runs, its judge.
EXPECTED_CLAIMS = [
    ("pareto", "pareto_r_inner_beta", "noise_dominates"),
    ("heatmap", "pareto_r_inner_beta", "r_inner_trade"),
    ("tradeoff", "pareto_r_inner_beta", "noise_per_r_inner"),
    ("tradeoff_r_inner", "tradeoff_r_inner", "r_inner_trade"),
    ("tradeoff_epsilon", "tradeoff_epsilon", "epsilon_trade"),
    ("tradeoff_eta", "eta", "small_momentum"),
    ("tradeoff_beta", "beta_schedule", "no_noise_at_r4"),
    ("tradeoff_wavefront", "wavefront", "wavefront_growth"),
    ("tradeoff_headway", "headway", "headway_no_gain"),
    ("tradeoff_init_scale", "init_scale", "minor_effect_init_scale"),
    ("tradeoff_continuous_compute", "continuous_compute", "continuous_compute_worse"),
    ("cache_sharing", "kv_sharing", "kv_sharing_free"),
    ("token_stability", "pareto_r_inner_beta", "tokens_settle"),
    ("latent_change", "pareto_r_inner_beta", "delta_shrinks"),
    ("qualitative_examples", "pareto_r_inner_beta", "small_r_inner_stalls"),
    ("table1", "table1", "diffusion_speedup"),
    ("pareto", "table1", "diffusion_vs_loopspec"),
]


def test_each_figure_is_judged_by_its_judge():
    assert [(c.figure, c.recipe, c.judge.__name__) for c in CLAIMS] == EXPECTED_CLAIMS
    assert all(c.judge is getattr(claims, c.judge.__name__) for c in CLAIMS)
    recipes = {p.stem for p in (Path(__file__).resolve().parents[2] / "sweeps").glob("*.yaml")}
    assert {c.recipe for c in CLAIMS} <= recipes


def test_the_report_draws_every_claimed_figure(tmp_path):
    """Each claim's figure is a stem that `plan_figures` produces for a study holding the data the claim needs."""
    from analysis.report import plan_figures

    tokens, frozen = staircase(6, True)
    trace = write_trace(tmp_path / "t.npz", tokens, frozen, 1, np.where(tokens >= 0, 0.5, np.nan))
    rows = [static(32, 0.5, 20.0, kv_cache=k, kv_cache_bytes=b) for k, b in (("shared", 10), ("per_step", 320))]
    rows += [diff(0.4, 100 / r, r_inner=r, beta=b, trace_paths=[trace]) for r in (1, 4) for b in (0.0, 0.2)]
    sweeps = {"epsilon": (0.01, 0.1), "eta": (0.0, 0.5), "wavefront": (16, 64), "headway": (1, 2),
              "init_scale": (0.0, 1.0), "continuous_compute": (False, True)}
    for key, values in sweeps.items():
        rows += [diff(0.4, 50.0, r_inner=4, beta=0.0, **{key: v}) for v in values]
    rows += [diff(0.4, 50.0, r_inner=4, beta=b, beta_schedule="linear") for b in (0.0, 0.5)]
    drawn = {stem for stem, _ in plan_figures(trials(rows))}
    assert {c.figure for c in CLAIMS if c.figure != "table1"} <= drawn


def test_judge_all_missing_recipe_is_na():
    out = claims.judge_all({}, CLAIMS[:2])
    assert [v.status for _, v in out] == ["n/a", "n/a"]
    assert "no trials of recipe" in out[0][1].evidence


@pytest.mark.parametrize("checks,expected", [([True, True], "agrees"), ([False, False], "disagrees"),
                                             ([True, False], "disagrees"), ([True, None], "inconclusive"),
                                             ([None, None], "inconclusive"), ([False, None], "disagrees"), ([], "n/a")])
def test_status_levels(checks, expected):
    v = verdicts.Verdict([verdicts.Check("x", c) for c in checks])
    assert v.status == expected
    assert v.evidence.count("?") == checks.count(None)


def test_outcomes_are_counted():
    vs = [verdicts.Verdict([verdicts.Check("x", c)]) for c in (True, True, False, None)] + [verdicts.Verdict()]
    assert verdicts.count_outcomes(vs) == {"agrees": 2, "disagrees": 1, "inconclusive": 1, "n/a": 1}
    assert math.isclose(vs[2].disagreement, 1.0) and vs[3].disagreement == 0.0
