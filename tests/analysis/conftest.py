"""Fixtures for the analysis tests: hand-made traces and a synthetic study in a temp dir."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import optuna
import polars as pl
import pytest
from optuna.distributions import CategoricalDistribution

optuna.logging.set_verbosity(optuna.logging.WARNING)


def set_metric_names(study: optuna.Study) -> None:
    with warnings.catch_warnings():  # experimental in Optuna, but the sweep uses it
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(["accuracy", "tokens_per_s"])

SAMPLER_DEFAULTS = {"r_inner": 4, "beta": 0.0, "beta_schedule": "linear", "eta": 0.1, "epsilon": 0.03,
                    "wavefront": 128, "headway": 1, "init_scale": 1.0, "continuous_compute": False,
                    "freeze": "adaptive", "r": 32, "kv_cache": "shared", "max_steps": 512}
CHOICES = {"sampler": ("diffusion", "static", "adaptive", "speculative"), "r_inner": (1, 2, 4),
           "beta": (0.0, 0.2, 0.5), "r": (4, 8, 32, 64), "kv_cache": ("shared", "per_step"),
           "epsilon": (0.01, 0.03, 0.1)}


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def make_trace(path: Path | None = None) -> dict:
    """3 prompt tokens, 5 generated positions, 6 sampler steps; -1 where not yet written."""
    tokens = np.array([
        [7, 8, 9, 11, -1, -1, -1, -1],
        [7, 8, 9, 12, 21, -1, -1, -1],
        [7, 8, 9, 12, 22, 31, -1, -1],
        [7, 8, 9, 12, 22, 33, 41, -1],
        [7, 8, 9, 12, 22, 33, 42, 50],
        [7, 8, 9, 12, 22, 33, 42, 51],
    ], dtype=np.int32)
    frozen = np.array([3, 3, 4, 5, 6, 8], dtype=np.int32)
    counter = np.cumsum(np.where(tokens >= 0, 4, 0), axis=0).astype(np.int32)
    delta = np.where(tokens >= 0, 0.5 ** np.arange(1, 7)[:, None], np.nan).astype(np.float16)
    delta[:, :3] = np.nan
    trace = {"tokens": tokens, "frozen": frozen, "counter": counter, "delta": delta, "prompt_len": np.int64(3)}
    if path is not None:
        np.savez(path, **trace)
    return trace


@pytest.fixture
def trace() -> dict:
    return make_trace()


REFERENCE_TPS = 1200.0 / 32   # static AR at r=32 in build_trials: every trial's speed-up is timed against it


def _timing(tps: float) -> dict:
    """What recdiff.timing.PairedTiming.attrs() records: tokens/s ±3%, the paired speed-up ±3%, 3 rounds, 1 thread."""
    speedup = tps / REFERENCE_TPS
    return {"tokens_per_s_lo": 0.97 * tps, "tokens_per_s_hi": 1.03 * tps, "speedup": speedup,
            "speedup_lo": 0.97 * speedup, "speedup_hi": 1.03 * speedup, "reference_tokens_per_s": REFERENCE_TPS,
            "timing_rounds": 3, "threads": 1}


def _attrs(out: Path, n: int, sampler: dict, acc: float, tps: float, traced: bool, kv_bytes: int,
           timed: bool = True) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    samples = pl.DataFrame({
        "problem_id": [f"p{i}" for i in range(4)], "prompt": ["q"] * 4, "output": ["a"] * 4,
        "extracted": ["1"] * 4, "reference": ["1"] * 4, "correct": [True, True, False, acc > 0.5],
        "new_tokens": [10] * 4, "time_s": [0.1] * 4, "tokens_per_s": [tps] * 4, "core_passes": [40] * 4,
        "steps": [12] * 4})
    samples.write_parquet(out / "samples.parquet")
    traces = []
    if traced:
        make_trace(out / "trace_0.npz")
        traces = [str(out / "trace_0.npz")]
    timing = _timing(tps) if timed and tps else {}
    return {**timing, "accuracy_lo": max(acc - 0.05, 0.0), "accuracy_hi": min(acc + 0.05, 1.0), "n_samples": 4,
            "core_passes_per_token": 8.0, "peak_memory_bytes": 10 * 2**20, "kv_cache_bytes": kv_bytes,
            "output_dir": str(out), "samples_path": str(out / "samples.parquet"), "trace_paths": traces,
            "config": {"sampler": {"name": sampler["name"], **{k: v for k, v in sampler.items() if k != "name"}},
                       "benchmark": {"name": "gsm8k"}, "model": {"name": "tiny"}}}


def build_trials(root: Path, timed: bool = True) -> list[optuna.trial.FrozenTrial]:
    """Diffusion r′ × β grid, an ε sweep, static AR at several r (r=32 with and without KV
    sharing), adaptive and speculative baselines, and one failed trial. `timed=False`: as recorded before paired
    timing (no tokens/s interval, no speed-up)."""
    trials, n = [], 0

    def add(params: dict, sampler: dict, acc: float | None, tps: float | None, traced=False, kv_bytes=2**20,
            state=optuna.trial.TrialState.COMPLETE):
        nonlocal n
        attrs = _attrs(root / f"trial_{n:03d}", n, sampler, acc or 0.0, tps or 0.0, traced, kv_bytes, timed)
        trials.append(optuna.trial.create_trial(
            params=params, distributions={k: CategoricalDistribution(CHOICES[k]) for k in params},
            values=None if acc is None else [acc, tps], user_attrs=attrs, state=state))
        n += 1

    for r_inner in (1, 2, 4):
        for beta in (0.0, 0.2, 0.5):
            acc = 0.30 + 0.03 * r_inner + (0.02 if beta == 0.2 else 0.0)
            tps = 400.0 / r_inner + 40 * beta
            add({"sampler": "diffusion", "r_inner": r_inner, "beta": beta},
                {"name": "diffusion", **SAMPLER_DEFAULTS, "r_inner": r_inner, "beta": beta}, acc, tps,
                traced=(beta == 0.0))
    for eps in (0.01, 0.1):
        add({"sampler": "diffusion", "r_inner": 4, "beta": 0.0, "epsilon": eps},
            {"name": "diffusion", **SAMPLER_DEFAULTS, "epsilon": eps}, 0.42 - eps, 100 + 1000 * eps)
    for r in (4, 8, 32, 64):
        add({"sampler": "static", "r": r}, {"name": "static", "r": r, "kv_cache": "shared"},
            min(0.45, 0.012 * r), 1200.0 / r, kv_bytes=2**20)
    add({"sampler": "static", "r": 32, "kv_cache": "per_step"},
        {"name": "static", "r": 32, "kv_cache": "per_step"}, 0.40, 36.0, kv_bytes=32 * 2**20)
    add({"sampler": "adaptive"}, {"name": "adaptive", "epsilon": 0.03, "r": 32}, 0.41, 60.0)
    add({"sampler": "speculative"}, {"name": "speculative", "r": 32, "r_draft": 4, "lookahead": 4}, 0.42, 70.0)
    add({"sampler": "diffusion", "r_inner": 2, "beta": 0.5}, {"name": "diffusion", **SAMPLER_DEFAULTS},
        None, None, state=optuna.trial.TrialState.FAIL)
    return trials


def journal_storage(path: Path) -> optuna.storages.JournalStorage:
    return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))


def _sweep_dir(root: Path, timed: bool) -> Path:
    root.mkdir()
    study = optuna.create_study(study_name="synthetic", directions=["maximize", "maximize"],
                                storage=journal_storage(root / "journal.log"))
    set_metric_names(study)
    for t in build_trials(root / "trials", timed):
        study.add_trial(t)
    (root / "study.json").write_text(json.dumps({"storage": str(root / "journal.log"), "study_name": "synthetic"}))
    return root


@pytest.fixture
def study_dir(tmp_path: Path) -> Path:
    """A sweep output dir: journal storage + study.json, as the sweep writes it."""
    return _sweep_dir(tmp_path / "sweep", timed=True)


@pytest.fixture
def unpaired_study_dir(tmp_path: Path) -> Path:
    """The same study as recorded before paired timing: no tokens/s interval, no speed-up attributes."""
    return _sweep_dir(tmp_path / "old_sweep", timed=False)
