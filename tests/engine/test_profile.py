"""The step profile (recdiff/tools/profile.py): what it counts as a step, a model call and a host read, and that it
leaves nothing patched behind. Nothing here is timed; the figures come from ``python -m recdiff.bench --profile``."""

from __future__ import annotations

import time

import pytest
import torch

from recdiff import generate, load_model
from recdiff.engine.graphs import EmulatedGraph
from recdiff.engine.runner import Runner
from recdiff.model import RecurrentDepthModel
from recdiff.samplers.ar import ARBatch
from recdiff.samplers.diffusion import DiffusionBatch
from recdiff.samplers.speculative import SpeculativeBatch
from recdiff.tools.profile import MODEL_CALLS, RUNNER_CALLS, Profile, profiling
from tests.conftest import RAVEN_TINY

STEP_CLASSES = (ARBatch, SpeculativeBatch, DiffusionBatch)


class Reader:
    """A batch whose step reads four device values in four ways, one of them inside a nested step."""

    def step(self) -> list[int]:
        t = torch.tensor([3])
        t.item(), t.tolist(), bool(t)
        return self.inner()

    def inner(self) -> list[int]:
        return [int(torch.tensor(1))]


def test_reads_are_counted_inside_steps_only():
    torch.tensor([1.0]).tolist()  # before: not counted
    with profiling([Reader]) as prof:
        Reader().step()
        Reader().step()
        torch.tensor([2]).item()  # outside a step: not counted
    assert (prof.steps, prof.step_reads) == (2, 8)
    assert prof.reads_per_step == 4 and prof.step_s >= prof.step_model_s == 0


def test_the_profiles_own_bookkeeping_takes_nothing_from_the_sampler_or_the_model(monkeypatch):
    """A step of 3 ms of its own work around two 5 ms model calls: the profile's timed bookkeeping is taken out of
    the step, and neither share loses what it spent (sleeps last at least as long as asked)."""
    monkeypatch.setattr(RecurrentDepthModel, "embed", lambda self, *a: time.sleep(0.005))

    class Sleeper:
        def step(self) -> list[int]:
            time.sleep(0.003)
            RecurrentDepthModel.embed(None)
            RecurrentDepthModel.embed(None)
            return []

    with profiling([Sleeper]) as prof:
        for _ in range(3):
            Sleeper().step()
    assert prof.steps == 3 and prof.step_model_s >= 3 * 0.010 and prof.own_s >= 3 * 0.003
    assert 0 < prof.step_tool_s < 0.001 and prof.step_tool_s <= prof.step_s - prof.step_model_s - 3 * 0.003
    assert prof.own_share == prof.own_s / (prof.step_s - prof.step_tool_s)


def test_patches_are_undone():
    before = {name: getattr(torch.Tensor, name) for name in ("item", "tolist", "__bool__", "__index__")}
    owned = {name: name in vars(torch.Tensor) for name in before}
    calls = (Runner.embed, Runner.cores, Runner.step, RecurrentDepthModel.core_step, DiffusionBatch.step)
    with profiling(STEP_CLASSES):
        assert torch.Tensor.tolist is not before["tolist"] and DiffusionBatch.step is not calls[-1]
    assert {name: getattr(torch.Tensor, name) for name in before} == before
    assert {name: name in vars(torch.Tensor) for name in before} == owned
    assert (Runner.embed, Runner.cores, Runner.step, RecurrentDepthModel.core_step, DiffusionBatch.step) == calls


def test_a_diffusion_run_profiles_every_step(load_fixture_model):
    model = load_fixture_model(RAVEN_TINY)
    with profiling(STEP_CLASSES) as prof:
        res = generate(model, [5, 6, 7, 8], "diffusion", max_new_tokens=12, r=8, r_inner=2, stop_token_ids=[])
    assert isinstance(prof, Profile) and prof.steps == res.stats["steps"]
    # the model calls of the steps are part of the steps; the prefill's are outside them
    assert 0 < prof.step_model_s < prof.step_s and prof.model_s > prof.step_model_s
    assert 0 < prof.own_share < 1 and 0 < prof.step_tool_s < prof.step_s - prof.step_model_s


def test_a_replayed_model_step_counts_as_a_model_call(monkeypatch):
    """Under CUDA graphs a replay calls no model piece from Python (the device ran none on the GPU before the
    profile knew replays: model 0%). Here the emulated replay hides the pieces as a CUDA graph does: the steps'
    model time is the replayed model steps, and a diffusion step's advance (its own work) stays outside."""
    model = load_model(RAVEN_TINY)
    model.engine_options["emulate_graphs"] = True
    unpatched = [(cls, name, getattr(cls, name)) for cls, names in ((Runner, RUNNER_CALLS),
                                                                    (RecurrentDepthModel, MODEL_CALLS))
                 for name in names]
    replay, graphed = EmulatedGraph.__call__, Runner.step

    def opaque(self: EmulatedGraph, *inputs: torch.Tensor):
        patched = [(cls, name, getattr(cls, name)) for cls, name, _ in unpatched]
        for cls, name, f in unpatched:
            setattr(cls, name, f)
        try:
            return replay(self, *inputs)
        finally:
            for cls, name, f in patched:
                setattr(cls, name, f)

    kinds: dict[str, set[bool]] = {}

    def recorded(self: Runner, st, *inputs: torch.Tensor, model: bool = True, **kw):
        kinds.setdefault(st.fn.__name__, set()).add(model)
        return graphed(self, st, *inputs, model=model, **kw)

    monkeypatch.setattr(EmulatedGraph, "__call__", opaque)
    monkeypatch.setattr(Runner, "step", recorded)
    with profiling(STEP_CLASSES) as prof:
        res = generate(model, [5, 6, 7, 8], "diffusion", max_new_tokens=12, r=8, r_inner=2, stop_token_ids=[])
    assert kinds == {"model_step": {True}, "advance": {False}}
    assert prof.steps == res.stats["steps"] and 0 < prof.step_model_s < prof.step_s


# ------------------------------------------------------------------------------------------------ host reads per step
DIFFUSION = [
    {"r": 8, "r_inner": 2, "freeze": "fixed"},
    {"r": 16, "r_inner": 4, "epsilon": 0.05, "wavefront": 24},
    {"r": 16, "r_inner": 4, "epsilon": 0.05, "wavefront": 6, "adaptive_rule": "reference", "freeze_rule": "last"},
    {"r": 8, "r_inner": 2, "epsilon": 0.05, "wavefront": 6, "headway": 2, "beta": 0.3, "init_scale": 0.5, "eta": 0.2,
     "continuous_compute": True},
    {"r": 8, "r_inner": 2, "headway": 3, "pad_id": 0, "r_freeze": 6},
]


@pytest.mark.slow
def test_every_diffusion_step_reads_the_host_once(load_fixture_model):
    """One read per step whatever the rule, stop ids, sampling or batch: the shift (and the window's tokens)."""
    model = load_fixture_model(RAVEN_TINY)
    prompts = [[5, 6, 7, 8], [9, 10, 11], [3, 4, 5, 6, 7, 8, 9]]
    # each rule once, with stop ids, sampling or neither in turn (every pairing would triple the suite's time here)
    kws = ({"stop_token_ids": []}, {"stop_token_ids": [7, 9]}, {"temperature": 0.8, "seed": 3})
    for i, params in enumerate(DIFFUSION):
        kw = kws[i % len(kws)]
        with profiling(STEP_CLASSES) as prof:
            res = generate(model, prompts, "diffusion", max_new_tokens=10, batch_size=2, **params, **kw)
        assert prof.step_reads == prof.steps, (params, kw)
        assert prof.steps >= max(r.stats["steps"] for r in res)


def test_a_stop_string_is_checked_without_another_read():
    from tests.closed_form import ClosedForm

    model = ClosedForm(a=0.5, script="xxx" + "ab\n\ncdefgh")
    with profiling(STEP_CLASSES) as prof:
        res = generate(model, [1, 2, 3], "diffusion", max_new_tokens=10, r=4, r_inner=2, freeze="fixed",
                       stop_strings=["\n\n"])
    assert res.stopped_by == "stop_string" and prof.step_reads == prof.steps == res.stats["steps"] == 4


def test_token_samplers_read_once_per_token_or_round(load_fixture_model):
    """Static AR and greedy speculative decoding read once per step; adaptive compute adds its exit checks (at most
    one per recurrence, none after the last), sampled speculative decoding the tokens drawn at rejections."""
    model = load_fixture_model(RAVEN_TINY)
    prompts = [[5, 6, 7, 8], [9, 10, 11], [3, 4, 5, 6, 7, 8, 9]]
    for sampler, params, most in [("static", {"r": 4}, 1), ("speculative", {"r": 6, "r_draft": 2, "lookahead": 3}, 1),
                                  ("speculative", {"r": 6, "r_draft": 2, "lookahead": 3, "temperature": 0.8}, 2),
                                  ("adaptive", {"r": 8, "epsilon": 0.05}, 8)]:
        with profiling(STEP_CLASSES) as prof:
            generate(model, prompts, sampler, max_new_tokens=8, batch_size=2, stop_token_ids=[], **params)
        assert prof.steps > 0 and prof.step_reads <= most * prof.steps, sampler
        if most == 1:
            assert prof.step_reads == prof.steps
