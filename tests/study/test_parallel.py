"""Several worker processes on one study: a real PostgreSQL server and the journal file (the joblib launcher:
test_scale.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from optuna.trial import TrialState

from tests.sweep_helpers import TINY, load, popen_sweep, requires_fixture

pytestmark = pytest.mark.slow


def search_args(tmp: Path, storage: str, name: str, n_trials: int) -> list[str]:
    return ["study=search", f"study.name={name}", f"study.storage={storage}", f"study.artifact_dir={tmp}/artifacts",
            "sampler=static", "study.search=[r]", "study.space.r.low=1", "study.space.r.high=64",
            "study.algorithm=random", "study.seed=7", f"study.n_trials={n_trials}", *TINY]


@requires_fixture
@pytest.mark.parametrize("kind", ["journal", "postgres"])
def test_three_workers_share_one_study(tmp_path, kind, request):
    storage = str(tmp_path / "journal.log") if kind == "journal" else request.getfixturevalue("postgres").url
    name = f"shared-{kind}-{tmp_path.name}"
    workers = [popen_sweep([*search_args(tmp_path, storage, name, 6), f"worker={w}", f"hydra.run.dir={tmp_path}/w{w}"],
                           log=tmp_path / f"w{w}.log") for w in range(3)]
    try:
        codes = [w.wait(timeout=400) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    logs = "\n".join((tmp_path / f"w{i}.log").read_text()[-1500:] for i in range(3))
    assert codes == [0, 0, 0], logs
    study = load(storage, name)
    trials = study.get_trials()
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 6, logs                                    # the total, not 3 x 6
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)   # none RUNNING or lost
    assert len({t.params["r"] for t in complete}) == 6                 # each configuration once
    assert [t.number for t in trials] == list(range(len(trials)))
    dirs = [Path(t.user_attrs["output_dir"]) for t in complete]
    assert len(set(dirs)) == 6 and all((d / "result.json").exists() for d in dirs)
    ran = sum((tmp_path / f"w{i}.log").read_text().count("COMPLETE accuracy=") for i in range(3))
    assert ran == 6                                                    # no trial ran twice
    assert "speed-up table: not shown" not in logs                     # each worker read the study back
