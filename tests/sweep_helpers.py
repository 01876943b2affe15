"""Helpers shared by the tests of sweep.py, the study, the trial, the tune and the tools: compose configs, run sweep.py
in a subprocess, read studies; and the fixtures their folders' conftest.py files take from here (``_clear_hydra``,
``postgres``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
from tests.conftest import SHARED  # noqa: E402  (the fixtures the whole suite reads)

FIXTURE = SHARED / "fixtures" / "raven_tiny"
EMBEDDED = REPO / "recdiff" / "assets" / "embedded"

# The smallest real workload: the fixture checkpoint (random weights, byte-encoded prompts), one arith
# problem, a couple of tokens, two rounds of paired timing (the fewest that give an interval). Every subprocess test
# adds these to its command. Without the baselines (study.baselines=false), so that a test's study holds exactly its
# own trials; tests/study/test_baselines.py has them.
TINY = ["model=fixture", "benchmark=arith", "benchmark.limit=1", "run.max_new_tokens=2", "run.repeats=2",
        "run.warmup=0", "run.threads=1", "run.progress=false", "study.baselines=false"]


def compose_cfg(overrides: list[str] = ()):
    import recdiff.schema  # noqa: F401

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def compose_plan(overrides: list[str] = ()):
    """The typed plan of a composed config (every setting checked), as a sweep job builds it."""
    from recdiff.schema import make_plan

    return make_plan(compose_cfg(overrides))


def run_sweep(args: list[str], timeout: float = 240, env: dict | None = None, check: bool = True,
              **kw) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONUNBUFFERED": "1", "RECDIFF_SHARED": str(SHARED), **(env or {})}
    proc = subprocess.run([sys.executable, str(REPO / "sweep.py"), *args], cwd=REPO, env=e, capture_output=True,
                          text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"sweep.py {' '.join(args)} -> {proc.returncode}\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def popen_sweep(args: list[str], env: dict | None = None, log: Path | None = None) -> subprocess.Popen:
    e = {**os.environ, "PYTHONUNBUFFERED": "1", "RECDIFF_SHARED": str(SHARED), **(env or {})}
    out = open(log, "w") if log else subprocess.DEVNULL
    return subprocess.Popen([sys.executable, str(REPO / "sweep.py"), *args], cwd=REPO, env=e, stdout=out,
                            stderr=subprocess.STDOUT)


def one_line(proc: subprocess.CompletedProcess) -> str:
    """The sweep's stderr, which must be one line and no traceback."""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    return lines[0]


def load(storage: str, name: str):
    import optuna

    from recdiff.study import open_storage

    return optuna.load_study(study_name=name, storage=open_storage(storage))


def exactly_once(study) -> dict[str, object]:
    """Every configuration of the study COMPLETE exactly once, nothing RUNNING or WAITING: config hash → trial."""
    from optuna.trial import TrialState

    trials = study.get_trials()
    assert not [t.number for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    complete = Counter(t.user_attrs["config_hash"] for t in trials if t.state == TrialState.COMPLETE)
    assert set(complete.values()) == {1}, complete
    return {t.user_attrs["config_hash"]: t for t in trials if t.state == TrialState.COMPLETE}


@pytest.fixture(autouse=True)
def _clear_hydra():
    yield
    GlobalHydra.instance().clear()


requires_fixture = pytest.mark.skipif(not (FIXTURE / "model.safetensors").exists(),
                                      reason=f"fixture checkpoint missing at {FIXTURE}")


@pytest.fixture(scope="module")
def postgres():
    """Debian's PostgreSQL, started as an unprivileged user on loopback in a temp dir, for one test module."""
    from tests.postgres import Postgres, server_binaries

    bindir = server_binaries()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries missing (Debian package `postgresql`)")
    server = Postgres(bindir)
    server.start()
    try:
        yield server
    finally:
        server.remove()
