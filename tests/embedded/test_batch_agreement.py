"""Batched (B=32) and batch-1 completions on the embedded benchmark: every sampler at the paper's settings agrees
on at least 98% of problems, and accuracy agrees within a point (``python -m recdiff.tools.agreement`` runs the same
comparison on 200 problems and prints the logit margin of every disagreement)."""

from __future__ import annotations

import pytest

from recdiff.tools.agreement import ASSET, ROWS, compare

N = 100  # problems (the script's default is 200; half keeps CI short, and 98% of 100 still allows 2 misses)


@pytest.fixture(scope="module")
def setup():
    from recdiff import load_model
    from recdiff.benchmarks import checkpoint_task, get_benchmark

    bench = get_benchmark(checkpoint_task(ASSET), limit=N)
    return load_model(ASSET), bench, list(bench.problems())


@pytest.mark.slow
@pytest.mark.parametrize("sampler", list(ROWS))
def test_batched_and_alone_agree(setup, sampler):
    model, bench, problems = setup
    res = compare(model, bench, problems, sampler, ROWS[sampler], batch=32, max_new_tokens=64)
    assert res["agree"] >= 0.98 * N, res["diffs"]
    assert abs(res["acc"]["batched"] - res["acc"]["alone"]) <= 0.01
    assert res["acc"]["alone"] >= 0.9  # the model really answers (at r=32 it solves all 200, MODEL_CARD.md)
