"""What the GPU tests share: the skip, the models, and the one comparison they allow to differ, a logit near-tie."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from recdiff import load_model
from recdiff.tools.agreement import first_difference, margin_at

# RECDIFF_EMULATE_GPU=1: the suite on a CPU, "cuda" standing for the CPU and CUDA graphs for their emulation
# (engine_options["emulate_graphs"]: the same static buffers and replays), Huginn's shapes left out. A check of the
# graph path's bookkeeping before a GPU is at hand, not of CUDA's numbers.
EMULATE = os.environ.get("RECDIFF_EMULATE_GPU") == "1"
DEVICE = "cpu" if EMULATE else "cuda"
NO_CUDA = ("no CUDA device: tests/gpu runs on a GPU machine (python -m pytest tests/gpu; see tests/gpu/README.md; "
           "RECDIFF_EMULATE_GPU=1 runs it on a CPU with CUDA graphs emulated)")
needs_cuda = pytest.mark.skipif(not (torch.cuda.is_available() or EMULATE), reason=NO_CUDA)

# The greedy choice at a position is a near-tie when its two best logits differ by less than this (the fixtures'
# median top-2 margin is 0.14 and 0.29, their smallest about 3e-3; fp32 rounding between devices moves logits by
# ~1e-5). The margin is recomputed without a cache at the sampler's r, as ``python -m recdiff.tools.agreement``
# does for batched against batch-1 runs on a CPU.
NEAR_TIE = 1e-2


def comparable(stats: dict) -> dict:
    return {k: v for k, v in stats.items() if k != "kv_cache_bytes"}


def check_same(model: Any, prompts: list[list[int]], want: list[Any], got: list[Any], r: int, what: str) -> list[tuple]:
    """Each pair of results equal (tokens, stop reason, stats), or its first differing token a near-tie of
    ``model``'s logits (margin below :data:`NEAR_TIE`). Returns the near-ties found, (prompt, position, margin);
    fails on anything else, listing every difference."""
    ties, other = [], []
    for i, (a, b) in enumerate(zip(want, got, strict=True)):
        if a.tokens == b.tokens and a.stopped_by == b.stopped_by and comparable(a.stats) == comparable(b.stats):
            continue
        j = first_difference(a.tokens, b.tokens)
        if j is None:
            diff = {k: (v, b.stats.get(k)) for k, v in comparable(a.stats).items() if b.stats.get(k) != v}
            other.append(f"prompt {i}: same tokens, other stats or stop ({a.stopped_by}/{b.stopped_by}) {diff}")
            continue
        margin = margin_at(model, prompts[i] + a.tokens[:j], r)
        (ties if margin < NEAR_TIE else other).append((i, j, margin))
    assert not other, (f"{what}: differences that are not near-ties (prompt, position, margin): {other}; "
                       f"near-ties: {ties}")
    if ties:
        print(f"{what}: {len(ties)} of {len(want)} sequences differ at a logit near-tie "
              f"(prompt, position, margin): {ties}")
    return ties


def load(d: Path, device: str = "cuda", dtype: str = "float32", compile: bool = False) -> Any:
    """``recdiff.load_model``; under :data:`EMULATE`, "cuda" is the CPU and ``compile=True`` emulates CUDA graphs."""
    if device == "cuda" and EMULATE:
        model = load_model(d, device=DEVICE, dtype=dtype)
        model.engine_options["emulate_graphs"] = compile
        return model
    return load_model(d, device=device, dtype=dtype, compile=compile)


class Models:
    """Fixture checkpoints loaded once per process, per (folder, device, dtype, compile): :func:`load`."""

    def __init__(self) -> None:
        self.cache: dict[tuple, Any] = {}

    def __call__(self, d: Path, device: str = "cuda", dtype: str = "float32", compile: bool = False) -> Any:
        key = (d, device, dtype, compile)
        if key not in self.cache:
            self.cache[key] = load(d, device, dtype, compile)
        return self.cache[key]


def check_graphs_match_eager(fixture_dir: Path, models: Any, sampler: str, params: dict) -> None:
    """CUDA graphs give the eager tokens and statistics, alone and batched (``models``: the suite's cached loader;
    shared by raven_tiny's test and the families')."""
    from recdiff import generate
    from tests.matrices import prompts

    eager, graphs = models(fixture_dir, "cuda"), models(fixture_dir, "cuda", compile=True)
    ps = prompts(fixture_dir)
    kw = dict(max_new_tokens=10, stop_token_ids=[], **params)
    for batch_size in (1, len(ps)):
        want = generate(eager, ps, sampler, batch_size=batch_size, **kw)
        got = generate(graphs, ps, sampler, batch_size=batch_size, **kw)
        check_same(eager, ps, want, got, params["r"], f"{fixture_dir.name} {sampler} {params}: graphs against "
                                                      f"eager, B={batch_size}")


def check_batch_equals_alone_on_cuda(fixture_dir: Path, models: Any, sampler: str, params: dict,
                                     compile: bool) -> None:
    """A batch gives every prompt what it gives alone, on CUDA, eager or replayed from graphs (shared by raven_tiny's
    test and the families')."""
    from recdiff import generate
    from tests.matrices import LIMITS, batch_prompts, stop_token

    model = models(fixture_dir, "cuda", compile=compile)
    prompts = batch_prompts(fixture_dir)
    stop = stop_token(model, prompts, LIMITS, sampler, params)
    alone = [generate(model, p, sampler, max_new_tokens=n, stop_token_ids=[stop], **params)
             for p, n in zip(prompts, LIMITS)]
    assert len({len(r.tokens) for r in alone}) > 2  # the sequences really end at different steps
    for batch_size in (3, len(prompts)):
        together = generate(model, prompts, sampler, max_new_tokens=LIMITS, stop_token_ids=[stop],
                            batch_size=batch_size, **params)
        check_same(model, prompts, alone, together, params["r"],
                   f"{fixture_dir.name} {sampler} {params} {'graphs' if compile else 'eager'}: B={batch_size} "
                   "against alone")
