"""What recdiff needs of the environment it is installed in.

pyproject.toml declares ranges and constraints.txt pins CI's set inside them. A torch too old for a feature (or one
whose private modules moved) fails in one line naming the feature, the torch found and the torch needed, before any
compute, never with a traceback from inside torch: simulated here on the installed torch with an older version
string, a private module that is missing and an inductor option it lacks."""

from __future__ import annotations

import sys
import tomllib

import pytest
import torch
from packaging.requirements import Requirement

from recdiff import RecdiffError, compat, generate, load_model
from recdiff.engine import program
from recdiff.engine.runner import set_compile
from tests.conftest import REPO, need_fixtures


def requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]]


def test_pyproject_declares_ranges_and_constraints_pin_every_one_inside_them():
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version
    for req in requirements():
        assert not any(s.operator == "==" for s in req.specifier), f"{req}: a range, not a pin"
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"constraints.txt does not pin {req.name}"
        assert req.specifier.contains(pins[name]), f"constraints.txt: {name}=={pins[name]} is outside {req}"
    torch_req = next(r for r in requirements() if r.name == "torch")
    floor = next(s.version for s in torch_req.specifier if s.operator == ">=")
    assert compat.version_tuple(floor) == compat.MIN_TORCH  # the floor recdiff checks is the one pip checks
    assert torch_req.specifier.contains("2.11.0+cu130")  # the GPU machine's CUDA build is kept, not replaced


@pytest.fixture(autouse=True)
def fresh_lookup():
    program.internals.cache_clear()  # the lookup is cached per process: each test sees its own torch
    yield
    program.internals.cache_clear()


def one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    # one line, and no chained exception from inside torch printed above it
    assert "\n" not in msg and err.value.__cause__ is None
    assert err.value.__context__ is None or err.value.__suppress_context__
    return msg


def test_versions_are_read_from_release_and_local_builds():
    assert compat.version_tuple("2.13.0+cpu") == (2, 13)
    assert compat.version_tuple("2.11.0+cu130") == (2, 11)
    assert compat.version_tuple("2.12.0a0+git70d99e9") == (2, 12)
    assert compat.version_tuple("garbage") == (0, 0)
    assert compat.version_tuple(torch.__version__) >= compat.MIN_TORCH  # what CI runs meets the floor


def test_an_old_torch_refuses_the_cpu_compile_path_in_one_line_and_eager_still_runs(monkeypatch):
    d = need_fixtures()
    monkeypatch.setattr(torch, "__version__", "2.9.1+cpu")
    with pytest.raises(RecdiffError) as err:
        load_model(d, compile=True)
    msg = one_line(err)
    assert "compile=True on a CPU" in msg and "torch >= 2.11" in msg and "2.9.1+cpu" in msg
    assert "compile=False" in msg  # what to do instead
    model = load_model(d)  # eager needs nothing private: it loads and runs
    assert len(generate(model, [1, 2, 3], "static", r=2, max_new_tokens=2).tokens) == 2
    with pytest.raises(RecdiffError, match=r"compile=True on a CPU.*found torch 2\.9\.1\+cpu"):
        set_compile(model, True)
    assert not model.engine_options.get("compile")


def test_a_missing_private_module_is_named_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch._inductor.compile_fx", None)  # importing it now raises ImportError
    with pytest.raises(RecdiffError) as err:
        load_model(need_fixtures(), compile=True)
    msg = one_line(err)
    assert "compile=True on a CPU" in msg and "torch._inductor.compile_fx" in msg and torch.__version__ in msg
    assert "compile=False" in msg  # what to do instead


def test_an_inductor_option_this_torch_lacks_is_named_in_one_line(monkeypatch):
    model = load_model(need_fixtures())
    monkeypatch.setitem(program.PATCHES, "an_option_of_a_later_torch", True)
    with pytest.raises(RecdiffError) as err:
        set_compile(model, True)
    assert "an_option_of_a_later_torch" in one_line(err)
    # a runner built for a model whose options were set directly checks too, before compiling anything
    model.engine_options["compile"] = True
    with pytest.raises(RecdiffError, match="an_option_of_a_later_torch"):
        generate(model, [1, 2, 3], "static", r=2, max_new_tokens=2)


SWEEP_STACK = ("hydra", "omegaconf", "optuna", "polars", "datasets", "matplotlib", "lm_eval", "analysis")


@pytest.mark.slow
def test_engine_samplers_and_bench_need_only_torch_numpy_safetensors():
    """A GPU box without a registry has torch, numpy and safetensors but not the sweep stack (docs/gpu.md): every
    sampler, the bench and the GPU tests' helpers import and run there. Checked in a process where importing any
    package of the sweep stack fails; the same run imports no compiler either."""
    import subprocess

    code = f"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {SWEEP_STACK!r}:
            raise ModuleNotFoundError("blocked " + name)
sys.meta_path.insert(0, Block())
import recdiff, recdiff.bench, recdiff.tools.speed, tests.gpu.common
model = recdiff.load_model({str(need_fixtures())!r})
for s in ("static", "adaptive", "speculative", "diffusion"):
    assert len(recdiff.generate(model, [1, 2, 3], s, max_new_tokens=3, stop_token_ids=[]).tokens) == 3, s
# nor the compiler: importing torch._dynamo (sympy among it) costs about 3 s in every sweep job and worker, and an
# eager load and run has no use for it (a meta-device op can import it: recdiff/model.py builds around them)
assert "torch._dynamo" not in sys.modules, "an eager load and run imported torch._dynamo"
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
