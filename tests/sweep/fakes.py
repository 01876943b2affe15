"""A fake trial runner for the in-process study tests (test_study.py, test_claims.py, test_identity.py): the
Optuna side runs for real, the measurement is replaced by a closed form."""

from __future__ import annotations

from pathlib import Path

from recdiff.study.grid import run_grid_trial
from recdiff.study.identity import identity_from_config
from recdiff.study.search import run_search
from recdiff.trial import TrialResult


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
