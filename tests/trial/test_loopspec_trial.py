"""A LoopSpec trial records what explains its speed (q1/q2 acceptance, sequential recurrences per token, core passes
per token, peak lanes), pooled over the slice; its per-sample table carries each problem's readouts, drawn for the
dashboard; and, lossless under greedy decoding, it answers every problem as static AR at the same depth with
per-step caches does."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import recdiff
from recdiff.trial.readouts import readout_attrs, verifications
from tests.sweep_helpers import compose_plan, requires_fixture


def stats(accepted: list[int], q1, q2, new_tokens: int, sequential: float, lanes: int) -> dict:
    return {"accepted": accepted, "q1_acceptance": q1, "q2_acceptance": q2, "new_tokens": new_tokens,
            "sequential_per_token": sequential, "peak_lanes": lanes}


def test_acceptance_is_pooled_over_the_slice_not_a_mean_of_ratios():
    # problem a: q1 right 3 of 4; q2 verified at the 4th token and right. b: q1 right 0 of 2; q2 verified twice,
    # right once (its other token: neither)
    a = stats([1, 1, 2, 1], 3 / 4, 1 / 1, 5, 6.0, 9)
    b = stats([2, 0], 0.0, 1 / 2, 3, 20.0, 13)
    got = readout_attrs([a, b])
    assert got["q1_acceptance"] == pytest.approx(3 / 6)          # (3 + 0) / (4 + 2), not (0.75 + 0) / 2
    assert got["q2_acceptance"] == pytest.approx(2 / 3)          # (1 + 1) / (1 + 2), not (1 + 0.5) / 2
    # 6 recurrences waited per token over a's 4 tokens after its first, 20 over b's 2
    assert got["sequential_per_token"] == pytest.approx((6 * 4 + 20 * 2) / 6)
    assert got["peak_lanes"] == 13


def test_a_readout_never_verified_is_none_and_a_ratio_of_zero_takes_the_most_it_can_be():
    assert readout_attrs([stats([1, 1], 1.0, None, 3, 4.0, 9)])["q2_acceptance"] is None
    assert verifications(0, None, 5) == 0
    assert verifications(2, 2 / 7, 9) == 7
    # q2 verified and never right: the ratio says nothing of n; at most the tokens neither got right (3 here)
    assert readout_attrs([stats([0, 1, 0, 0], 0.25, 0.0, 5, 8.0, 9)])["q2_acceptance"] == 0.0
    assert readout_attrs([stats([0, 1, 0, 0], 0.25, 0.0, 5, 8.0, 9),
                          stats([2], 0.0, 1.0, 2, 8.0, 9)])["q2_acceptance"] == pytest.approx(1 / 4)


def _trial(tmp_path, *sampler: str):
    from recdiff.trial import prepare, run_trial

    plan = compose_plan(["model=fixture", "benchmark=arith", "benchmark.limit=4", "run.max_new_tokens=10",
                         "run.warmup=0", "run.progress=false", "run.speed_samples=1", "run.repeats=2",
                         "run.batch_size=4", "run.reference='static r=8'", *sampler])
    work = prepare(plan.model, plan.benchmark).load(1)
    return run_trial(work, plan.trial, tmp_path / "_".join(sampler))


@pytest.mark.slow
@requires_fixture
def test_a_loopspec_trial_records_its_readouts_and_answers_as_static_ar(tmp_path, monkeypatch):
    seen, prompted = [], []
    generate = recdiff.generate

    def watched(model, prompts, **kw):
        out = generate(model, prompts, **kw)
        if kw.get("sampler") == "loopspec" and kw.get("batch_size") == 4:   # the accuracy pass
            seen[:], prompted[:] = out, prompts
        return out

    monkeypatch.setattr(recdiff, "generate", watched)
    spec = _trial(tmp_path, "sampler=loopspec", "sampler.r=8", "sampler.r_draft=2", "sampler.r_draft2=4")
    static = _trial(tmp_path, "sampler=static", "sampler.r=8", "sampler.kv_cache=per_step")

    rows = pl.read_parquet(spec.attrs["samples_path"])
    accepted = rows["accepted"].to_list()
    assert [len(a) for a in accepted] == [n - 1 for n in rows["new_tokens"]]
    a = spec.attrs
    # pooled from the table's own columns: every committed token after the first verified q1's proposal
    assert a["q1_acceptance"] == pytest.approx(sum(x.count(1) for x in accepted) / sum(len(x) for x in accepted))
    assert a["core_passes_per_token"] == pytest.approx(rows["core_passes"].sum() / rows["new_tokens"].sum())
    # steps are cycles of r_draft = 2 recurrences; a token waits them after the first
    decoded = (rows["new_tokens"] - 1).clip(lower_bound=1)
    assert a["sequential_per_token"] == pytest.approx(2 * rows["steps"].sum() / decoded.sum())
    assert a["peak_lanes"] == max(r.stats["peak_lanes"] for r in seen) > 1
    # the K/V cache each call asked for over the tokens its sequence held, the most of them
    assert a["kv_bytes_per_token"] == pytest.approx(max(r.stats["kv_cache_bytes"] / (len(p) + r.stats["new_tokens"])
                                                        for r, p in zip(seen, prompted)))
    q2 = [r.stats["q2_acceptance"] for r in seen if r.stats["q2_acceptance"] is not None]
    assert a["q2_acceptance"] is None if not q2 else min(q2) <= a["q2_acceptance"] <= max(q2)
    assert not {"q1_acceptance", "q2_acceptance", "sequential_per_token", "peak_lanes"} & set(static.attrs)
    assert "accepted" not in pl.read_parquet(static.attrs["samples_path"]).columns

    # lossless: the same answers as static AR r=8 with per-step caches, hence the same accuracy
    assert rows["output"].to_list() == pl.read_parquet(static.attrs["samples_path"])["output"].to_list()
    assert spec.accuracy == static.accuracy

    # the dashboard's picture: one strip per problem, and the table as CSV with the readouts spelled out
    assert spec.picture.endswith("readouts.png") and static.picture is None
    csv = pl.read_csv(spec.attrs["output_dir"] + "/samples.csv", schema_overrides={"accepted": pl.String})
    assert csv["accepted"].fill_null("").to_list() == [" ".join(map(str, x)) for x in accepted]


def test_the_readouts_picture_draws_each_problems_strip():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from recdiff.artifacts import READOUTS, draw_readouts

    fig, ax = plt.subplots()
    draw_readouts(ax, [[1, 2, 0], [1]], labels=["p0", "p1"])
    shown = ax.images[0].get_array()
    np.testing.assert_array_equal(shown.filled(-1), [[1, 2, 0], [1, -1, -1]])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [f"{n} right" for n in READOUTS]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["p0", "p1"]
    plt.close(fig)
