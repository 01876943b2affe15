"""Checks of the samplers that hold on every checkpoint, shared by raven_tiny's tests (tests/engine,
tests/samplers) and the families' (tests/families/test_samplers.py): each takes the checkpoint folder and the
suite's model loader, so that a test calls a check, never another test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from recdiff import generate, load_model
from tests.matrices import LIMITS, ONE_PER_SAMPLER, batch_prompts, prompts, stop_token

Loader = Callable[[Path], Any]


def comparable(stats: dict) -> dict:
    """A result's statistics without its cache's size (a batch's cache is shared, a lone prompt's is its own)."""
    return {k: v for k, v in stats.items() if k != "kv_cache_bytes"}


def check_batch_equals_alone(fixture_dir: Path, load_fixture_model: Loader, sampler: str, params: dict) -> None:
    """A batch (of 3, and of every prompt) gives each prompt the tokens, stop reason and statistics it gets alone,
    with the sequences ending at different steps."""
    model = load_fixture_model(fixture_dir)
    ps = batch_prompts(fixture_dir)
    stop = stop_token(model, ps, LIMITS, sampler, params)
    alone = [generate(model, p, sampler, max_new_tokens=n, stop_token_ids=[stop], **params)
             for p, n in zip(ps, LIMITS)]
    assert len({len(r.tokens) for r in alone}) > 2  # the sequences really end at different steps
    assert len({r.stopped_by for r in alone}) > 1  # some stop on the token (or the step cap), others at length
    for batch_size in (3, len(ps)):
        together = generate(model, ps, sampler, max_new_tokens=LIMITS, stop_token_ids=[stop],
                            batch_size=batch_size, **params)
        assert isinstance(together, list) and len(together) == len(ps)
        for i, (one, many) in enumerate(zip(alone, together)):
            assert many.tokens == one.tokens, (i, batch_size)
            assert many.stopped_by == one.stopped_by, (i, batch_size)
            assert comparable(many.stats) == comparable(one.stats), (i, batch_size)


def _graphed(fixture_dir: Path):
    model = load_model(fixture_dir)
    model.engine_options["emulate_graphs"] = True
    return model


def check_graph_replay_alone(fixture_dir: Path, load_fixture_model: Loader) -> None:
    """Every prompt alone through the replayed graphs (emulated on a CPU: a decode loop replays one graph over and
    over, its input buffers the same tensors with the next positions in them): the eager tokens, for every
    sampler."""
    eager, graphed = load_fixture_model(fixture_dir), _graphed(fixture_dir)
    for sampler, params in ONE_PER_SAMPLER:
        for p in prompts(fixture_dir):
            kw = dict(max_new_tokens=10, stop_token_ids=[], **params)
            assert generate(graphed, p, sampler, **kw).tokens == generate(eager, p, sampler, **kw).tokens, sampler


def check_graph_replay_batched(fixture_dir: Path, load_fixture_model: Loader) -> None:
    """The prompts batched through the replayed graphs (static input buffers whose outputs the next replay
    overwrites): each prompt's eager tokens, for every sampler."""
    eager, graphed = load_fixture_model(fixture_dir), _graphed(fixture_dir)
    ps = prompts(fixture_dir)
    for sampler, params in ONE_PER_SAMPLER:
        want = [generate(eager, p, sampler, max_new_tokens=10, stop_token_ids=[], **params).tokens for p in ps]
        got = generate(graphed, ps, sampler, max_new_tokens=10, stop_token_ids=[], batch_size=3, **params)
        assert [r.tokens for r in got] == want, sampler


def fixture_prompts(fixture_dir: Path) -> list[list[int]]:
    """The folder's ``prompts.json`` prompts."""
    return list(json.loads((fixture_dir / "prompts.json").read_text()).values())


def check_fixed_freeze_with_r_inner_r_is_static_ar(fixture_dir: Path, load_fixture_model: Loader) -> None:
    """The diffusion sampler with a fixed freeze and r' = r (and no noise) is static AR at r: the same tokens and
    core passes (paper Section 3.3)."""
    model = load_fixture_model(fixture_dir)
    for prompt in fixture_prompts(fixture_dir):
        for r in (4, 8):
            static = generate(model, prompt, "static", max_new_tokens=12, r=r)
            diff = generate(model, prompt, "diffusion", max_new_tokens=12, r=r, r_inner=r, freeze="fixed", eta=0.0)
            assert diff.tokens == static.tokens
            assert diff.stats["core_passes"] == static.stats["core_passes"]


def check_wavefront_one_is_adaptive_ar(fixture_dir: Path, load_fixture_model: Loader, epsilon: float) -> None:
    """The diffusion sampler with a wavefront of one and r' = 1 is adaptive-compute AR at the same ε: the same
    tokens and the same exits, recurrence for recurrence."""
    model = load_fixture_model(fixture_dir)
    for prompt in fixture_prompts(fixture_dir):
        ar = generate(model, prompt, "adaptive", max_new_tokens=12, r=32, epsilon=epsilon, exit_in_prefill=False)
        diff = generate(model, prompt, "diffusion", max_new_tokens=12, r=32, r_inner=1, wavefront=1, eta=0.0,
                        epsilon=epsilon, r_freeze=32)
        assert diff.tokens == ar.tokens
        assert diff.stats["core_passes"] == ar.stats["core_passes"]
