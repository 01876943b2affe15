"""Sampler registry and the one entry point, :func:`generate`."""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Sequence

import torch

from recdiff.engine import Request, run_batched
from recdiff.errors import RecdiffError
from recdiff.model import RecurrentDepthModel
from recdiff.params import SAMPLER_PARAMS, SamplerParams
from recdiff.samplers.base import GenerationResult, Options, Selector, StopCondition, default_stop_ids

SAMPLERS = ("static", "adaptive", "speculative", "diffusion", "loopspec")


def sampler_spec(name: str) -> dict[str, tuple[Any, Any]]:
    """name → (default, check) of every parameter the sampler accepts."""
    _module(name)
    return SAMPLER_PARAMS[name].spec()


def check_params(name: str, params: dict[str, Any]) -> SamplerParams:
    """The sampler's typed parameters (:mod:`recdiff.params`) with defaults filled in, or one :class:`RecdiffError`
    line: unknown names, out-of-range values and invalid combinations (``r_inner > r``, ...). Needs no model:
    lm-eval's model calls it before anything loads; ``generate`` takes its keyword arguments through it, the one
    way in, and the sampler runs with what it returns."""
    _module(name)
    return SAMPLER_PARAMS[name].checked(params)


def _module(name: str) -> Any:
    if name not in SAMPLERS:
        raise RecdiffError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")
    return importlib.import_module(f"recdiff.samplers.{name}")


Prompts = Sequence[int] | torch.Tensor | Sequence[Sequence[int]]


def default_batch_size(device: torch.device) -> int:
    """Sequences decoded side by side when ``batch_size`` is not given."""
    return 32


@torch.inference_mode()
def generate(
    model: RecurrentDepthModel,
    prompts: Prompts,
    sampler: str = "static",
    max_new_tokens: int | Sequence[int] = 256,
    seed: int | Sequence[int] | None = 0,
    temperature: float = 0.0,
    top_p: float = 1.0,
    stop_token_ids: Sequence[int] | None = None,
    stop_strings: Sequence[str] | None = None,
    trace: bool | Sequence[bool] = False,
    batch_size: int | None = None,
    progress: Callable[[int], None] | None = None,
    **params: Any,
) -> GenerationResult | list[GenerationResult]:
    """Generate up to ``max_new_tokens`` new tokens after each prompt.

    ``prompts`` is one prompt (a list of token ids or a 1-D tensor: one :class:`GenerationResult` comes back) or a
    list of prompts (a list of results, in order). Up to ``batch_size`` sequences are decoded side by side and a
    sequence that finishes makes room for the next (continuous batching); each keeps its own positions, stops,
    random stream (seeded with ``seed``, which may be given per prompt) and statistics, so its result does not depend
    on the batch it ran in.
    ``max_new_tokens`` and ``trace`` may be given per prompt. ``params`` are the sampler's hyperparameters, named
    after the paper (r, r_inner, epsilon, beta, eta, …); unknown names and out-of-range values raise
    :class:`recdiff.RecdiffError` before any compute.
    """
    single, state, requests = _plan(model, prompts, sampler, max_new_tokens, seed, temperature, top_p,
                                    stop_token_ids, stop_strings, trace, batch_size, params)
    results = run_batched(state, requests, progress)
    return results[0] if single else results


def _plan(model: RecurrentDepthModel, prompts: Prompts, sampler: str, max_new_tokens: int | Sequence[int],
          seed: int | Sequence[int] | None, temperature: float, top_p: float, stop_token_ids: Sequence[int] | None,
          stop_strings: Sequence[str] | None, trace: bool | Sequence[bool], batch_size: int | None,
          params: dict[str, Any]) -> tuple[bool, Any, list[Request]]:
    """:func:`generate`'s arguments checked (one :class:`RecdiffError` line, before any compute): (is one prompt,
    the sampler's batch state, one request per prompt)."""
    module = _module(sampler)
    single, batch = _as_batch(prompts, model)
    n = len(batch)
    limits = _per_prompt(max_new_tokens, n, "max_new_tokens")
    for i, lim in enumerate(limits):
        if not isinstance(lim, int) or isinstance(lim, bool) or lim < 1:
            raise RecdiffError(f"max_new_tokens={lim!r} must be an integer >= 1" + ("" if single else f" (prompt {i})"))
    traces = _per_prompt(trace, n, "trace")
    if any(traces) and sampler != "diffusion":
        raise RecdiffError(f"trace=True is only available for the diffusion sampler, not {sampler!r}")
    seeds = _per_prompt(seed, n, "seed")
    for i, sd in enumerate(seeds):
        if sd is not None and (not isinstance(sd, int) or isinstance(sd, bool)):
            raise RecdiffError(f"seed={sd!r} must be an integer (or None)" + ("" if single else f" (prompt {i})"))
    if batch_size is not None and (not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1):
        raise RecdiffError(f"batch_size={batch_size!r} must be an integer >= 1")
    opts = Options(
        model=model,
        select=Selector(temperature, top_p),
        stop=StopCondition(default_stop_ids(model, stop_token_ids), stop_strings, model.tokenizer),
        slots=min(n, batch_size or default_batch_size(model.device)),
        longest=max(len(ids) + lim for ids, lim in zip(batch, limits)),
    )
    p = check_params(sampler, params)  # the typed parameters, validated once, before any compute
    refusal = model.refuses(p)  # what the model's loop cannot give these settings a meaning on
    if refusal:
        raise RecdiffError(refusal)
    state = module.make_batch(opts, p)
    for i, (ids, lim) in enumerate(zip(batch, limits)):
        state.check(i if not single else None, len(ids), lim)
    requests = []
    for i, (ids, lim, tr) in enumerate(zip(batch, limits, traces)):
        gen = torch.Generator(device=model.device)
        gen.manual_seed(0 if seeds[i] is None else seeds[i])
        requests.append(Request(index=i, prompt=ids, max_new_tokens=lim, generator=gen, trace=bool(tr)))
    return single, state, requests


@torch.inference_mode()  # as generate: the buffers its checks allocate are the ones the runs use
def warm_up(model: RecurrentDepthModel, prompts: Sequence[Sequence[int]], sampler: str = "static",
            batch_size: int | None = None, max_new_tokens: int = 8, **kwargs: Any) -> None:
    """Run the calls a later :func:`generate` over ``prompts`` meets, untimed, so that a compiled model compiles (a
    CUDA one captures) its graphs here and not inside a timed run. Compiled graphs are specialised on the kind of
    call and on few rows vs many (:data:`recdiff.engine.program.MANY_ROWS`), so the shortest and the longest prompt
    each run alone, then in a batch where every kind of admission happens: all slots at once, one slot while the
    others decode (a sequence with a shorter limit finishes first), two at once. Under CUDA graphs a sampler whose
    shapes depend on more than the prompts then captures the rest (the diffusion sampler: every wavefront width with
    every key count it can reach, ``DiffusionBatch.warm_shapes``). An eager model compiles nothing:
    it runs the longest prompt alone (allocations, kernel selection). ``prompts``: one prompt or a list of them, checked
    as :func:`generate` checks them; ``kwargs`` as for :func:`generate`."""
    batch_size = batch_size or default_batch_size(model.device)
    # checked as generate checks them, with generate's defaults: one RecdiffError line, not a traceback from min()
    call = inspect.signature(generate).bind(model, prompts, sampler, max_new_tokens, batch_size=batch_size, **kwargs)
    call.apply_defaults()
    arguments = {k: v for k, v in call.arguments.items() if k != "progress"}
    _, _, requests = _plan(**arguments)
    prompts = [r.prompt for r in requests]
    options = model.engine_options
    if not (options.get("compile") or options.get("emulate_graphs")):
        generate(model, max(prompts, key=len), sampler, max_new_tokens=max_new_tokens, **kwargs)
        return
    for p in {len(p): p for p in (min(prompts, key=len), max(prompts, key=len))}.values():
        generate(model, p, sampler, max_new_tokens=max_new_tokens, **kwargs)
        if batch_size > 1:
            limits = [max_new_tokens] * (batch_size + 3)
            limits[batch_size - 1] = max(1, max_new_tokens // 2)
            generate(model, [p] * (batch_size + 3), sampler, max_new_tokens=limits, batch_size=batch_size, **kwargs)
    # CUDA graphs are captured per shape: a sampler whose shapes depend on more than the prompts (the diffusion
    # wavefront's width, on how fast it converges) runs every shape it can meet, for one slot and for a batch
    shortest, longest = min(map(len, prompts)), max(map(len, prompts)) + max_new_tokens
    for group in {1: prompts[:1], batch_size: prompts[:1] * batch_size}.values():
        _, state, _ = _plan(**{**arguments, "prompts": group})
        if hasattr(state, "warm_shapes") and state.runner.cuda_graphs:
            state.warm_shapes(shortest, longest)


def _per_prompt(value: Any, n: int, name: str) -> list[Any]:
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise RecdiffError(f"{name} has {len(value)} entries for {n} prompts")
        return list(value)
    return [value] * n


def _as_batch(prompts: Prompts, model: RecurrentDepthModel) -> tuple[bool, list[list[int]]]:
    """(is one prompt, the prompts as lists of ints), checked: no empty batch or prompt, ids in the vocabulary."""
    if isinstance(prompts, torch.Tensor):
        if prompts.dim() == 2 and prompts.shape[0] == 1:
            prompts = prompts[0]
        if prompts.dim() != 1 or prompts.dtype.is_floating_point or prompts.dtype == torch.bool:
            raise RecdiffError(f"a prompt tensor must be 1-D token ids, got shape {tuple(prompts.shape)} "
                               f"{prompts.dtype}")
        prompts = prompts.tolist()
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, (list, tuple)):
        raise RecdiffError(f"prompts must be a list of token ids or a list of such lists, got {type(prompts).__name__}")
    if len(prompts) == 0:
        raise RecdiffError("the prompt (or batch) is empty; give at least one token id")
    kinds = {"list" if isinstance(p, (list, tuple, torch.Tensor)) else "id" for p in prompts}
    if len(kinds) > 1:
        raise RecdiffError("prompts mix token ids and lists of token ids; give one prompt or a list of prompts")
    single = kinds == {"id"}
    batch = [prompts] if single else [p.tolist() if isinstance(p, torch.Tensor) else p for p in prompts]
    vocab = model.config.padded_vocab_size
    for i, p in enumerate(batch):
        where = "" if single else f" {i}"
        if isinstance(p, (str, bytes)) or not isinstance(p, (list, tuple)):
            raise RecdiffError(f"prompt{where} must be a list of token ids, got {type(p).__name__}")
        if len(p) == 0:
            raise RecdiffError(f"prompt{where} is empty; give at least one token id")
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in p):
            bad = next(t for t in p if not isinstance(t, int) or isinstance(t, bool))
            raise RecdiffError(f"prompt{where} holds {bad!r}; token ids must be integers")
        if min(p) < 0 or max(p) >= vocab:
            raise RecdiffError(f"prompt{where} holds token ids outside the vocabulary [0, {model.config.vocab_size})")
    return single, [list(p) for p in batch]


__all__ = ["generate", "GenerationResult", "SAMPLERS", "sampler_spec", "check_params", "default_batch_size"]
