"""The step profile (recdiff/engine/profile.py): what it counts as a step, a model call and a host read, and that it
leaves nothing patched behind. Nothing here is timed; the figures come from ``python -m recdiff.bench --profile``."""

from __future__ import annotations

import torch

from recdiff import generate
from recdiff.engine.profile import Profile, profiling
from recdiff.engine.runner import Runner
from recdiff.model import RecurrentDepthModel
from recdiff.samplers.ar import ARBatch
from recdiff.samplers.diffusion import DiffusionBatch
from recdiff.samplers.speculative import SpeculativeBatch
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


def test_patches_are_undone():
    before = {name: getattr(torch.Tensor, name) for name in ("item", "tolist", "__bool__", "__index__")}
    owned = {name: name in vars(torch.Tensor) for name in before}
    calls = (Runner.embed, Runner.cores, RecurrentDepthModel.core_step, DiffusionBatch.step)
    with profiling(STEP_CLASSES):
        assert torch.Tensor.tolist is not before["tolist"] and DiffusionBatch.step is not calls[-1]
    assert {name: getattr(torch.Tensor, name) for name in before} == before
    assert {name: name in vars(torch.Tensor) for name in before} == owned
    assert (Runner.embed, Runner.cores, RecurrentDepthModel.core_step, DiffusionBatch.step) == calls


def test_a_diffusion_run_profiles_every_step(load_fixture_model):
    model = load_fixture_model(RAVEN_TINY)
    with profiling(STEP_CLASSES) as prof:
        res = generate(model, [5, 6, 7, 8], "diffusion", max_new_tokens=12, r=8, r_inner=2, stop_token_ids=[])
    assert isinstance(prof, Profile) and prof.steps == res.stats["steps"]
    # the model calls of the steps are part of the steps; the prefill's are outside them
    assert 0 < prof.step_model_s < prof.step_s and prof.model_s > prof.step_model_s
    assert 0 < prof.own_share < 1
