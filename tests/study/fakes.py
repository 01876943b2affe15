"""A fake trial runner for the in-process study tests (test_study.py, test_claims.py, test_identity.py,
test_fencing.py): the Optuna side runs for real, the measurement is replaced by a closed form; and their plan, study
and clock (a grid plan on a journal, the study it opens, the heartbeats' clock advanced instead of slept)."""

from __future__ import annotations

from pathlib import Path

import recdiff.study.record as study_record
import recdiff.study.storage as study_storage
from recdiff.study.connect import open_storage, open_study
from recdiff.study.grid import run_grid_trial
from recdiff.study.identity import identity_from_config
from recdiff.study.search import run_search
from recdiff.trial import TrialResult
from tests.sweep_helpers import compose_plan


class FakeWork:
    device = "cpu"
    threads = None


def identity(plan) -> dict:
    """The plan's identity without a checkpoint (no weights digest): what these in-process tests record."""
    return identity_from_config(plan.as_dict())


def grid_trial(plan, study, job_dir):
    return run_grid_trial(plan, study, FakeWork, job_dir, identity(plan))


def search(plan, study, job_dir):
    return run_search(plan, study, FakeWork(), job_dir, identity(plan))


def fake_run_trial(calls: list, fail: dict | None = None):
    """accuracy = r_inner / 10, tokens/s = 100 / r_inner; `fail` maps r_inner to an exception."""

    def run(work, trial, output_dir):
        r = int(trial.sampler.r_inner)
        calls.append(r)
        if fail and r in fail:
            raise fail[r]
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        (Path(output_dir) / "samples.csv").write_text("problem_id,correct\n0,true\n")
        attrs = dict(accuracy_lo=0.0, accuracy_hi=1.0, n_samples=1, core_passes_per_token=1.0,
                     peak_memory_bytes=1, kv_cache_bytes=None, samples_path=str(Path(output_dir) / "samples.parquet"),
                     trace_paths=[], output_dir=str(output_dir))
        return TrialResult(accuracy=r / 10, tokens_per_s=100 / r, attrs=attrs)

    return run


def grid_plan(tmp_path: Path, *extra: str):
    return compose_plan([f"study.storage={tmp_path}/j.log", f"study.artifact_dir={tmp_path}/art", "study.name=c",
                         "sampler.r_inner=2", "study.heartbeat_interval=1", "study.grace_period=2", *extra])


def open_(plan):
    s = plan.study
    return open_study(s, open_storage(s.storage, s.heartbeat_interval, s.grace_period, s.max_retry))


class FakeClock:
    """The heartbeats' clock; a job that waits advances it instead of sleeping (``then`` runs at each wait)."""

    def __init__(self, monkeypatch, then=None) -> None:
        self.now, self.waits, self.then = 1_000_000.0, [], then
        monkeypatch.setattr(study_storage, "clock", lambda: self.now)
        monkeypatch.setattr(study_record, "sleep", self.sleep)

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        assert len(self.waits) < 100, "waited forever"
        self.now += seconds
        if self.then is not None:
            self.then()
