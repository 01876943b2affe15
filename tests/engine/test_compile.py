"""Compiled decoding (``compile=True``: torch.compile on a CPU, the same static shapes as the CUDA-graph path) gives
the eager tokens and compiles once per specialisation, never again after warm-up (the GPU path on a CPU:
test_gpu_path_on_cpu.py).

Compiling is what these tests spend their time on, so they compile with :data:`QUICK` inductor settings: Python
wrapper and no GEMM autotuning (about 1.8x quicker), and weights as graph inputs rather than frozen constants, which
inductor's FX graph cache can store (frozen mkldnn weights bypass it) and whose passes it skips (the compiled-tokens
test alone, 2 idle cores: 723 → 423 s), and scalar rather than vectorized C++ loops (static and diffusion compiled
cold on a 2-core AMD EPYC: 96 → 79 s). recdiff's own part, the capture, specialisation and replay of its programs, is
the same under either; test_compile_shipped.py checks the shipped settings. They compile the fixture cut to one block
in P, two in R and one in C (tests/matrices.py's ``shallow``): the same pieces and specialisations, with graphs a
third the size to trace and lower (the fixture's own depth is what the parity tests check, eagerly)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from recdiff import generate, load_model, warm_up
from recdiff.engine.runner import set_compile
from recdiff.engine.runner_cache import cache_length, get_runner
from tests.conftest import RAVEN_TINY, need_fixtures
from tests.matrices import ONE_PER_SAMPLER, prompts, quick_compile, shallow

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    return shallow(need_fixtures(RAVEN_TINY), tmp_path_factory.mktemp("shallow") / RAVEN_TINY.name)


@pytest.fixture(scope="module")
def compiled_model(small):
    """Chunks of two recurrences per compiled call (a loop inside the graph, as the engine's four) on the runner that
    the static, adaptive, speculative and diffusion samplers share in a batch; the runner made after it (a prompt
    alone) in single ones (``quick_compile``'s default: a third less compile time)."""
    model = load_model(small, compile=True)
    quick_compile(model, chunk=2)
    return model


# the samplers whose steps run on the shared-cache runner, in chunks of two there; LoopSpec's lanes compile single
# recurrences, as in tests/engine/test_setting_changes.py's compiled walk, which decodes every sampler compiled
CHUNKED = [(s, p) for s, p in ONE_PER_SAMPLER if s != "loopspec"]


def test_compiled_gives_the_eager_tokens(compiled_model, small, load_fixture_model):
    eager = load_fixture_model(small)
    ps = prompts(small)
    for sampler, params in CHUNKED:
        want = [generate(eager, p, sampler, max_new_tokens=10, stop_token_ids=[], **params).tokens for p in ps]
        together = generate(compiled_model, ps, sampler, max_new_tokens=10, stop_token_ids=[], batch_size=len(ps),
                            **params)
        assert [r.tokens for r in together] == want, sampler
    compiled_model.engine_options["chunk"] = 1   # the runners made from now on compile single recurrences
    sampler, params = CHUNKED[-1]
    assert generate(compiled_model, ps[0], sampler, max_new_tokens=10, stop_token_ids=[], **params).tokens == want[0]
    # chunks of two on the batch's shared-cache runner; the runner made after it, single recurrences
    assert sorted((key[2], key[0], run.chunk) for key, run in compiled_model._runners.items()) == [
        ("shared", 1, 1), ("shared", 4, 2)]
    # every replay above called inductor's generated code itself (program.direct), as it can in this torch
    assert all(p.direct is not None for run in compiled_model._runners.values() for p in run.programs.compiled.values())


def test_no_compilation_after_warm_up_across_many_prompt_lengths(compiled_model, small):
    """Warm-up (``recdiff.warm_up``): the shortest and the longest prompt alone and through every kind of
    admission. Then 20 prompts of 17 lengths (3 to 19 tokens), alone and batched: dynamo compiles no new graph
    (every width, prompt length and key count is a dynamic dimension of the same graphs, few rows and many rows
    included)."""
    from torch._dynamo.utils import counters  # here, not at the top: importing dynamo costs every worker ~1.5 s

    ps = prompts(small, 20)
    assert len({len(p) for p in ps}) == 17
    sampler, params = ONE_PER_SAMPLER[-1]
    kw = dict(stop_token_ids=[], **params)
    warm_up(compiled_model, ps, sampler, batch_size=4, max_new_tokens=10, **kw)
    before = counters["stats"]["unique_graphs"]
    assert before > 0  # the warm-up compiled something: this test counts real compilations
    for p in ps:
        generate(compiled_model, p, sampler, max_new_tokens=10, **kw)
    generate(compiled_model, ps, sampler, batch_size=4, max_new_tokens=10, **kw)
    assert counters["stats"]["unique_graphs"] == before
    # both row classes of the recurrences were met and compiled (a prefill's many rows, a wavefront's few)
    run = get_runner(compiled_model, 1, cache_length(compiled_model, 10))
    classes = {key[1][0] for key in run.programs.compiled if key[0].fn.__name__ == "core" and key[0].c[0] == run.chunk}
    assert classes == {False, True}


def test_weights_changed_after_compiling_are_not_served_stale_graphs():
    """Compiled pieces hold copies of the weights (frozen constants): a weight changed in place afterwards must not
    be served by the old graphs. The runners (and with them the programs) are dropped and built anew."""
    model = load_model(need_fixtures())
    set_compile(model, True)
    n = cache_length(model)
    first = get_runner(model, 1, n)
    assert get_runner(model, 1, n) is first  # unchanged weights: the compiled runner is reused
    with torch.no_grad():
        model.transformer.core_block[0].mlp.fc.weight.mul_(1.5)
    assert get_runner(model, 1, n) is not first
    set_compile(model, False)  # eager runners are cached as before
    eager = get_runner(model, 1, n)
    with torch.no_grad():
        model.transformer.core_block[0].mlp.fc.weight.mul_(2.0)
    assert get_runner(model, 1, n) is eager
