"""``run.timing_batch``: the paired timing at a batch size (the tune's question at batch 32). Each timed call decodes
that many problems side by side, for the trial's sampler and for the reference in the same rounds; it is part of the
study's identity (like run.reference), not of a configuration's hash."""

from __future__ import annotations

import pytest

import recdiff
from recdiff.errors import RecdiffError
from recdiff.study.identity import config_hash, conflict, identity_from_config, key
from tests.sweep_helpers import compose_plan, requires_fixture


def ident(*overrides: str) -> dict:
    return identity_from_config(compose_plan(list(overrides)).as_dict(), weights="w", dtype="float32")


def test_the_timing_batch_is_part_of_the_identity_not_the_hash():
    assert config_hash(compose_plan(["run.timing_batch=32"])) == config_hash(compose_plan())
    assert "timing_batch" not in ident()["run"]                     # studies recorded before it keep their identity
    assert key(ident("run.timing_batch=1")) == key(ident())
    assert [d[:3] for d in conflict(ident(), ident("run.timing_batch=32"))] == [("run.timing_batch", 1, 32)]


def test_a_bad_timing_batch_is_one_line():
    with pytest.raises(RecdiffError, match=r"run.timing_batch=0 must be an integer >= 1"):
        compose_plan(["run.timing_batch=0"])


@pytest.mark.slow
@requires_fixture
def test_each_timed_call_decodes_a_batch_for_both_samplers(tmp_path, monkeypatch):
    from recdiff.trial import prepare, run_trial

    plan = compose_plan(["model=fixture", "benchmark=arith", "benchmark.limit=3", "run.max_new_tokens=3",
                         "run.warmup=0", "run.progress=false", "run.n_traces=0", "run.speed_samples=2",
                         "run.repeats=2", "run.timing_batch=2", "sampler=diffusion", "sampler.r=4",
                         "sampler.r_inner=2"])
    work = prepare(plan.model, plan.benchmark).load(1)
    calls, slice_ids = [], []
    generate = recdiff.generate

    def watched(model, prompts, **kw):
        out = generate(model, prompts, **kw)
        ids = [tuple(p) for p in prompts] if isinstance(prompts, list) else None
        if ids and len(ids) == 3:                  # the accuracy pass: the whole slice, in order
            slice_ids[:] = ids
        elif ids and kw.get("batch_size") == 2:    # a timed call
            calls.append((kw["sampler"], [slice_ids.index(i) for i in ids], sum(r.stats["new_tokens"] for r in out)))
        return out

    monkeypatch.setattr(recdiff, "generate", watched)
    result = run_trial(work, plan.trial, tmp_path / "trial")
    # 2 rounds × 2 timed calls, the trial's sampler then the reference on the same problems, two side by side; the
    # second call wraps around the 3-problem slice so that every call is a full batch
    assert [(s, rows) for s, rows, _ in calls] == [("diffusion", [0, 1]), ("static", [0, 1]),
                                                   ("diffusion", [2, 0]), ("static", [2, 0])] * 2
    a = result.attrs
    assert a["timing_batch"] == 2 and a["speed_samples"] == 2 and a["timing_rounds"] == 2
    assert a["speedup_lo"] <= a["speedup"] <= a["speedup_hi"] and a["speedup"] > 0
    # per-sample times are for problems timed alone: none here
    assert all(r["time_s"] is None and r["tokens_per_s"] is None for r in result.rows)
