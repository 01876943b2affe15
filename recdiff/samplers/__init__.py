"""Sampler registry and the one entry point, :func:`generate`."""

from __future__ import annotations

import importlib
from typing import Any, Sequence

import torch

from recdiff.errors import RecdiffError
from recdiff.model import RecurrentDepthModel
from recdiff.samplers.base import Context, GenerationResult, Selector, StopCondition, default_stop_ids

SAMPLERS = ("static", "adaptive", "speculative", "diffusion")


def sampler_spec(name: str) -> dict[str, tuple[Any, Any]]:
    """name → (default, check) of every parameter the sampler accepts."""
    return _module(name).SPEC


def _module(name: str) -> Any:
    if name not in SAMPLERS:
        raise RecdiffError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")
    return importlib.import_module(f"recdiff.samplers.{name}")


@torch.inference_mode()
def generate(
    model: RecurrentDepthModel,
    prompt_ids: Sequence[int] | torch.Tensor,
    sampler: str = "static",
    max_new_tokens: int = 256,
    seed: int | None = 0,
    temperature: float = 0.0,
    top_p: float = 1.0,
    stop_token_ids: Sequence[int] | None = None,
    stop_strings: Sequence[str] | None = None,
    trace: bool = False,
    **params: Any,
) -> GenerationResult:
    """Generate up to ``max_new_tokens`` new tokens after ``prompt_ids`` (batch size 1).

    ``params`` are the sampler's hyperparameters, named after the paper (r, r_inner, epsilon, beta, eta, …);
    unknown names and out-of-range values raise :class:`recdiff.RecdiffError` before any compute.
    """
    module = _module(sampler)
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 1:
        raise RecdiffError(f"max_new_tokens={max_new_tokens!r} must be an integer >= 1")
    if trace and sampler != "diffusion":
        raise RecdiffError(f"trace=True is only available for the diffusion sampler, not {sampler!r}")
    ids = torch.as_tensor(prompt_ids, dtype=torch.long).reshape(1, -1).to(model.device)
    if ids.shape[1] == 0:
        raise RecdiffError("the prompt is empty; give at least one token id")
    vocab = model.config.vocab_size
    if int(ids.min()) < 0 or int(ids.max()) >= model.config.padded_vocab_size:
        raise RecdiffError(f"prompt holds token ids outside the vocabulary [0, {vocab})")
    gen = torch.Generator(device=model.device)
    gen.manual_seed(0 if seed is None else int(seed))
    ctx = Context(
        model=model,
        prompt=ids,
        max_new_tokens=max_new_tokens,
        select=Selector(temperature, top_p, gen),
        stop=StopCondition(default_stop_ids(model, stop_token_ids), stop_strings, model.tokenizer),
        generator=gen,
        trace=trace,
    )
    return module.generate(ctx, params)


__all__ = ["generate", "GenerationResult", "SAMPLERS", "sampler_spec"]
