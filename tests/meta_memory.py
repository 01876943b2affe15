"""The buffers a batched run allocates, predicted on the meta device (no memory is used): the CPU suite checks that
Huginn-0125's fit a GPU (tests/engine/test_memory.py), tests/gpu/test_huginn.py holds a real run on a GPU to them.
Needs nothing beyond recdiff: tests/gpu imports it."""

from __future__ import annotations

import torch

from recdiff.model import RecurrentDepthModel
from recdiff.model_config import RecurrentConfig
from recdiff.samplers import _module, check_params
from recdiff.samplers.base import Options, Selector, StopCondition
from recdiff.tools.speed import SHAPES

GB = 1e9


def _tensors(batch) -> list[torch.Tensor]:
    """The batch's own tensors and the buffers its runner keeps for it (state, a step's outputs under graphs), once."""
    found = {}
    for v in [*vars(batch).values(), list(batch.runner._buffers.values())]:
        for t in v if isinstance(v, (list, tuple)) else [v]:
            if isinstance(t, torch.Tensor):
                found[id(t)] = t
    return list(found.values())


def meta_huginn() -> RecurrentDepthModel:
    with torch.device("meta"):
        return RecurrentDepthModel(RecurrentConfig(**SHAPES["huginn"])).to(torch.bfloat16)


def predicted_bytes(model: RecurrentDepthModel, sampler: str, params: dict, slots: int, longest: int,
                    graphs: bool = True) -> tuple[int, int, int, object]:
    """(weights, KV cache, batch state, the batch) of a batched run of a meta-device ``model`` (no memory is used):
    the buffers the sampler's batch allocates, with CUDA graphs (``graphs``: as a GPU runs it, where the diffusion
    sampler's model call writes into buffers of the whole window). tests/gpu/test_huginn.py holds a real run on a GPU
    to it."""
    model.engine_options = {**model.engine_options, "emulate_graphs": graphs}
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    opts = Options(model=model, select=Selector(0.0, 1.0), stop=StopCondition(None, None, None), slots=slots,
                   longest=longest)
    batch = _module(sampler).make_batch(opts, check_params(sampler, params))
    state = sum(t.numel() * t.element_size() for t in _tensors(batch))
    return weights, batch.runner.cache.nbytes(), state, batch
