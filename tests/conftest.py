"""Shared test setup: fixture folders of the authors' reference outputs, single-threaded torch."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

# tests run in parallel workers (pytest-xdist, one per core): one thread each, in this process and in the sweep
# subprocesses it starts (more would oversubscribe the cores: OpenMP threads spin while they wait)
os.environ.setdefault("OMP_NUM_THREADS", "1")
# and inductor compiles each graph's kernels in this process: its default pool of compile subprocesses (one per core)
# only adds their start-up and hand-over while the other worker keeps the second core busy (static and diffusion
# compiled cold on a 2-core AMD EPYC: 121 → 107 CPU-s)
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _shared() -> Path:
    """The folder whose ``fixtures/raven_tiny`` the tests read: ``RECDIFF_SHARED``; else ``../shared`` beside the
    checkout where it holds the fixtures (the team's layout, where newer reference outputs arrive); else the copy that
    travels with the repository, ``tests/fixtures`` (so a fresh clone runs every parity test)."""
    if "RECDIFF_SHARED" in os.environ:
        return Path(os.environ["RECDIFF_SHARED"])
    beside = REPO.parent / "shared"
    return beside if (beside / "fixtures" / "raven_tiny" / "config.json").is_file() else REPO / "tests"


SHARED = _shared()
RAVEN_TINY = SHARED / "fixtures" / "raven_tiny"
# every folder holding reference outputs: the checkpoint and its perturbed twin
FIXTURE_DIRS = [d for d in (RAVEN_TINY, RAVEN_TINY / "perturbed") if (d / "generate.json").is_file()]
MISSING = (f"reference fixtures not found under {RAVEN_TINY} (RECDIFF_SHARED names a folder without "
           "fixtures/raven_tiny; unset it to use the repository's tests/fixtures)")

torch.set_num_threads(1)

# every call whose caller hands the runner its arguments' specialisation is checked against prepare() (the default
# checks a key's first call and every 64th after)
import recdiff.engine.program  # noqa: E402

recdiff.engine.program.CHECK_EVERY = 1


def fixture_id(d: Path) -> str:
    return d.name


# the fast tier (make test-fast) runs the reference checkpoint's cases; its perturbed twin (the same code paths on
# other weights) runs in the full suite
@pytest.fixture(params=[pytest.param(d, marks=pytest.mark.slow) if d.name == "perturbed" else d for d in FIXTURE_DIRS],
                ids=fixture_id, scope="session")
def fixture_dir(request: pytest.FixtureRequest) -> Path:
    return request.param


# the fixtures record each case for two prompts: the fast tier checks every case on the first, the full suite on both
@pytest.fixture(params=["prompt_0", pytest.param("prompt_1", marks=pytest.mark.slow)], scope="session")
def fixture_prompt(request: pytest.FixtureRequest) -> str:
    return request.param


def need_fixtures(d: Path = RAVEN_TINY) -> Path:
    """``d``, or a skip with one reason for every test that needs the shared fixtures when they are absent."""
    if not (d / "config.json").is_file():
        pytest.skip(MISSING)
    return d


@pytest.fixture(scope="session")
def load_fixture_model():
    from recdiff import load_model

    cache: dict[Path, object] = {}

    def load(d: Path):
        if d not in cache:
            cache[d] = load_model(need_fixtures(d))
        return cache[d]

    return load


def read_cases(d: Path) -> tuple[dict, list[dict]]:
    g = json.loads((d / "generate.json").read_text())
    prompts = json.loads((d / "prompts.json").read_text())
    return prompts, g["cases"]


def pytest_itemcollected(item: pytest.Item) -> None:
    # the tests of a file that share a module-scoped fixture (a compiled model, a sweep's output, the paper run, a
    # server) form one xdist group: --dist loadgroup runs a group on one worker, so the fixture is built once
    info = getattr(item, "_fixtureinfo", None)
    if info is not None and any(d.scope in ("module", "class") for defs in info.name2fixturedefs.values()
                                for d in defs):
        item.add_marker(pytest.mark.xdist_group(item.path.stem))


def pytest_collection_modifyitems(config, items):
    # the slow tier first (a stable sort: file order otherwise), so that the long tests start early on the parallel
    # workers (-n auto --dist loadgroup hands out one test, or one xdist_group, at a time) instead of ending the run
    # on one of them
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    if not FIXTURE_DIRS:
        skip = pytest.mark.skip(reason=MISSING)
        for item in items:
            if "fixture_dir" in getattr(item, "fixturenames", ()):
                item.add_marker(skip)
