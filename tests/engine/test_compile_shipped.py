"""The CPU compile path with the inductor settings users get (program.PATCHES: C++ wrapper, frozen weights, GEMM
templates autotuned against MKL): a prompt's P, one recurrence and C, compiled, give the eager logits, captured and
replayed. The sampler cases run with quicker settings in test_compile.py; this file runs beside it (compiling is
slow), on the same cut of the fixture (tests/matrices.py's ``shallow``)."""

from __future__ import annotations

import pytest
import torch

from recdiff import load_model
from recdiff.engine.runner_cache import cache_length, get_runner
from recdiff.engine.step import Step
from tests.conftest import RAVEN_TINY, need_fixtures
from tests.matrices import QUICK, prompts, shallow

pytestmark = pytest.mark.slow


def test_the_shipped_inductor_settings_give_the_eager_logits(tmp_path):
    small = shallow(need_fixtures(RAVEN_TINY), tmp_path / RAVEN_TINY.name)
    model = load_model(small, compile=True)
    assert "inductor" not in model.engine_options  # nothing overrides program.PATCHES
    eager = load_model(small)
    ids = torch.tensor([prompts(small)[0]])
    pos = torch.arange(ids.shape[1])[None]

    @torch.inference_mode()  # as generate() runs the engine (a shared model's runners hold inference tensors)
    def logits(m) -> torch.Tensor:
        run = get_runner(m, 1, cache_length(m))
        return run.recur(ids, pos, 1)

    got, want = logits(model), logits(eager)
    programs = get_runner(model, 1, cache_length(model)).programs.compiled.values()
    assert programs  # it really compiled
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert torch.equal(got.argmax(-1), want.argmax(-1))
    # a replay calls inductor's generated code itself (program.direct), as it does with these settings in this torch,
    # and gives the capture's logits
    assert all(p.direct is not None for p in programs)
    again = logits(model)
    torch.testing.assert_close(again, want, rtol=1e-4, atol=1e-4)
    assert torch.equal(again, got)


def test_a_model_that_turns_vectorization_off_leaves_it_on_for_the_rest_of_the_process():
    """Inductor caches the CPU's vector ISAs once per process, filtered by ``cpp.vec_isa_ok`` as it holds at that first
    call. A model compiled with vectorization off (the compile tests' QUICK settings) must not leave the process
    without them: its later vectorized compiles would turn scalar, and a vectorized graph from the disk cache would
    fail to build."""
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list

    valid_vec_isa_list.cache_clear()
    expected = valid_vec_isa_list()  # the process's own settings
    if not expected:
        pytest.skip("this CPU has no vector ISA inductor uses")
    valid_vec_isa_list.cache_clear()
    model = load_model(need_fixtures(RAVEN_TINY), compile=True)
    # no disk cache: the graph is generated here, where inductor asks for the ISA list
    model.engine_options["inductor"] = {**QUICK, "fx_graph_cache": False}
    run = get_runner(model, 1, cache_length(model))
    x = torch.arange(8.0)[None]
    (y,) = run.run(Step(_double), (x,))
    assert torch.equal(y, x * 2 + 1)
    assert valid_vec_isa_list() == expected


def _double(c, run, x):
    return (x * 2 + 1,)
