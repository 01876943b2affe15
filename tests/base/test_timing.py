"""issue 32: the paired timing protocol (recdiff.timing.paired_timing) with a fake clock, its interval against a
hand-computed case, and a failing reference that ends as a FAIL trial, never a speed-up of 0 or infinity."""

from __future__ import annotations

import statistics
from math import comb
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from recdiff.errors import RecdiffError
from recdiff.timing import ReferenceTimingError, clustered_median_interval, median_interval, paired_timing


class FakeClock:
    """A clock that moves only when a fake sampler runs: each call takes a scripted time."""

    def __init__(self, warm: dict[str, dict[int, int]] | None = None) -> None:
        self.now = 0.0
        self.log: list[tuple[str, int]] = []
        self.warm = warm or {}   # sampler → prompt → how many of its first calls are the untimed warm-up

    def __call__(self) -> float:
        return self.now

    def sampler(self, name: str, tokens: list[int], seconds: dict[tuple[int, int], float], warm_s: float = 1000.0):
        """Sampler ``name``: prompt i generates tokens[i]; its n-th timed call on prompt i takes seconds[(n, i)];
        the calls before the timed ones (the warm-up) take ``warm_s`` each, far more than any timed call."""
        calls: dict[int, int] = {}

        def run(i: int) -> int:
            n = calls.get(i, 0) - self.warm.get(name, {}).get(i, 0)
            calls[i] = calls.get(i, 0) + 1
            self.now += warm_s if n < 0 else seconds[(n, i)]
            self.log.append((name, i))
            return tokens[i]
        return run


def _script(rounds: int, prompts: int, base: float, seed: int) -> dict[tuple[int, int], float]:
    rng = np.random.default_rng(seed)
    return {(r, i): base * (1 + i) * float(rng.uniform(0.8, 1.2)) for r in range(rounds) for i in range(prompts)}


def test_protocol_alternates_excludes_warmup_and_records_medians():
    rounds, prompts, warmup = 3, 4, 2
    clock = FakeClock(warm={"A": {0: 1, 1: 1}, "B": {0: 1, 1: 1}})   # warm-up: one call each on prompts 0 and 1
    tok_a, tok_b = [10, 20, 30, 40], [8, 16, 24, 32]
    sec_a, sec_b = _script(rounds, prompts, 0.1, 0), _script(rounds, prompts, 0.4, 1)
    before = torch.get_num_threads()
    res = paired_timing(clock.sampler("A", tok_a, sec_a), clock.sampler("B", tok_b, sec_b), prompts, rounds=rounds,
                        warmup=warmup, threads=1, clock=clock)

    # warm-up first (untimed), then A, B alternating on each prompt, round after round
    assert clock.log[:2 * warmup] == [("A", 0), ("B", 0), ("A", 1), ("B", 1)]
    assert clock.log[2 * warmup:] == [(s, i) for _ in range(rounds) for i in range(prompts) for s in ("A", "B")]
    # the warm-up's 1000 s never enter a timing: every recorded time is one of the scripted ones
    np.testing.assert_allclose(res.seconds, [[sec_a[(r, i)] for i in range(prompts)] for r in range(rounds)])
    np.testing.assert_allclose(res.reference_seconds, [[sec_b[(r, i)] for i in range(prompts)] for r in range(rounds)])
    # the figures are medians over prompts x rounds of what was timed, computed here from the script
    rate_a = {(r, i): tok_a[i] / sec_a[(r, i)] for r in range(rounds) for i in range(prompts)}
    rate_b = {(r, i): tok_b[i] / sec_b[(r, i)] for r in range(rounds) for i in range(prompts)}
    assert res.tokens_per_s == pytest.approx(statistics.median(rate_a.values()))
    assert res.reference_tokens_per_s == pytest.approx(statistics.median(rate_b.values()))
    assert res.speedup == pytest.approx(statistics.median(rate_a[k] / rate_b[k] for k in rate_a))
    assert res.tokens_per_s_lo <= res.tokens_per_s <= res.tokens_per_s_hi
    assert res.speedup_lo <= res.speedup <= res.speedup_hi
    assert res.tokens_per_s_lo >= min(rate_a.values()) and res.tokens_per_s_hi <= max(rate_a.values())
    assert res.timing_rounds == rounds and res.threads == 1
    np.testing.assert_allclose(res.prompt_seconds(), [statistics.median(sec_a[(r, i)] for r in range(rounds))
                                                      for i in range(prompts)])
    assert torch.get_num_threads() == before   # the thread count is restored after timing
    attrs = res.attrs()
    cells = attrs.pop("speedup_cells")   # per prompt, per round: the ratio of the pair timed together
    assert cells == [[pytest.approx(rate_a[(r, i)] / rate_b[(r, i)]) for r in range(rounds)] for i in range(prompts)]
    assert set(attrs) == {"tokens_per_s_lo", "tokens_per_s_hi", "speedup", "speedup_lo", "speedup_hi",
                          "reference_tokens_per_s", "timing_rounds", "threads"}
    assert all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in attrs.values())


def test_a_load_that_slows_both_samplers_cancels_in_the_paired_speedup():
    """Round 1 runs under a load that doubles every time: tokens/s spreads, the paired ratio does not."""
    clock = FakeClock()
    load = {(r, i): 2.0 if r == 1 else 1.0 for r in range(3) for i in range(2)}
    res = paired_timing(clock.sampler("A", [10, 10], {k: 0.1 * v for k, v in load.items()}),
                        clock.sampler("B", [10, 10], {k: 0.4 * v for k, v in load.items()}), 2, rounds=3, warmup=0,
                        clock=clock)
    assert (res.speedup, res.speedup_lo, res.speedup_hi) == pytest.approx((4.0, 4.0, 4.0))
    assert res.tokens_per_s_lo == pytest.approx(50.0) and res.tokens_per_s_hi == pytest.approx(100.0)


def test_the_reference_trial_has_speedup_one_with_an_interval_from_its_rounds():
    clock = FakeClock()
    times = iter([0.10, 0.12, 0.11, 0.09, 0.10, 0.13, 0.12, 0.10, 0.11, 0.10, 0.09, 0.12])
    calls: list[int] = []

    def static(i: int) -> int:
        calls.append(i)
        clock.now += next(times)
        return 10

    res = paired_timing(static, None, 2, rounds=3, warmup=0, clock=clock)
    assert len(calls) == 12                       # timed against itself: A and B are both the reference
    assert res.speedup == 1.0 and res.speedup_lo < 1.0 < res.speedup_hi
    assert res.reference_tokens_per_s == pytest.approx(statistics.median(10 / t for t in (0.12, 0.09, 0.13, 0.10,
                                                                                          0.10, 0.12)))


def test_median_interval_against_a_hand_computed_case():
    """21 values 1..21: a bootstrap resample's median is its 11th smallest draw, so P(median <= j) =
    P(Binomial(21, j/21) >= 11): 0.018 at j=6, 0.056 at j=7 (and symmetrically 0.982 at 15, 0.944 at 14). The 95%
    percentile interval is therefore [7, 15], whatever the seed."""
    def p_at_most(j: int) -> float:
        return sum(comb(21, k) * (j / 21) ** k * (1 - j / 21) ** (21 - k) for k in range(11, 22))
    assert p_at_most(6) < 0.025 < p_at_most(7) and p_at_most(14) < 0.975 < p_at_most(15)
    for seed in (0, 1, 2):
        assert median_interval(range(1, 22), seed=seed) == (11.0, 7.0, 15.0)
    shuffled = np.random.default_rng(3).permutation(np.arange(1.0, 22.0))
    assert median_interval(shuffled) == median_interval(shuffled)  # seeded: the same values, the same interval
    assert median_interval([5.0, 5.0, 5.0]) == (5.0, 5.0, 5.0)
    with pytest.raises(ValueError):
        median_interval([1.0])


@pytest.mark.parametrize("failure", ["zero tokens", "invalid settings"])
def test_a_failing_reference_raises_a_clear_error(failure):
    clock = FakeClock()

    def reference(i: int) -> int:
        clock.now += 0.5
        if failure == "invalid settings":
            raise RecdiffError("static: r must be >= 1")
        return 0

    def sample(i: int) -> int:
        clock.now += 0.1
        return 10

    with pytest.raises(ReferenceTimingError, match="reference measurement failed") as err:
        paired_timing(sample, reference, 2, rounds=3, warmup=0, clock=clock)
    assert not isinstance(err.value, RecdiffError)   # RecdiffError would record the trial PRUNED, not FAIL


def test_a_trial_whose_reference_fails_is_recorded_fail_without_a_speedup(monkeypatch, tmp_path):
    """The classification of a trial's outcome (recdiff.trial.evaluate) around a trial whose paired
    timing fails on the reference: FAIL, with the reason, and no speed-up recorded."""
    pytest.importorskip("optuna", reason="the sweep stack is not installed (a GPU box: docs/gpu.md)")
    import recdiff.trial
    from recdiff.trial import evaluate

    def run_trial(work, cfg, output_dir):
        res = paired_timing(lambda i: 10, lambda i: 0, 1, rounds=3, warmup=0)
        raise AssertionError(f"not reached: {res}")

    monkeypatch.setattr(recdiff.trial, "run_trial", run_trial)
    outcome = evaluate(SimpleNamespace(), SimpleNamespace(), tmp_path)
    assert outcome.state.name == "FAIL" and outcome.values is None
    assert outcome.attrs["fail_reason"].startswith("ReferenceTimingError: reference measurement failed")
    assert not {"speedup", "speedup_lo", "speedup_hi"} & set(outcome.attrs)


def test_protocol_rejects_too_few_rounds():
    with pytest.raises(ValueError, match="rounds >= 2"):
        paired_timing(lambda i: 1, None, 1, rounds=1)


def test_an_interval_by_problem_resamples_problems_with_their_rounds():
    """A cluster bootstrap: with every round of a problem alike, resampling problems with their rounds is resampling
    the problems' values, which median_interval does over the same draws; treating the 40 cells as independent
    narrows the interval as if there were 40 problems."""
    per_problem = [1.0, 1.3, 0.8, 1.1, 0.9, 1.6, 1.2, 0.7]
    cells = [[v] * 5 for v in per_problem]
    assert clustered_median_interval(cells) == pytest.approx(median_interval(per_problem))
    _, lo, hi = clustered_median_interval(cells)
    _, cell_lo, cell_hi = median_interval([c for row in cells for c in row])
    assert hi - lo > cell_hi - cell_lo
    # rounds that disagree within a problem widen it no further than their spread allows; the median is of all cells
    noisy = [[v * f for f in (0.95, 1.0, 1.05, 1.0, 1.0)] for v in per_problem]
    point, lo, hi = clustered_median_interval(noisy)
    assert point == pytest.approx(statistics.median(c for row in noisy for c in row)) and lo <= point <= hi
    assert clustered_median_interval(noisy, seed=3) == clustered_median_interval(noisy, seed=3)
    with pytest.raises(ValueError, match="at least two clusters"):
        clustered_median_interval([[1.0, 1.1, 0.9]])
