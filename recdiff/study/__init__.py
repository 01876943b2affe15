"""Optuna side of the sweeps (docs/architecture.md, "Studies"; docs/sweeps.md, "Failure semantics").

Objectives ``accuracy`` and ``tokens_per_s`` (both maximised, named with ``set_metric_names``); parameters named as
the config keys with distributions from ``study.space``; user attributes with the measurements, the full resolved
config, its ``identity`` (what it measures apart from the sampler), git commit, device, library versions and the
output directory. Each trial's stability picture and per-sample table are uploaded as artifacts
(``study.artifact_dir``) that ``optuna-dashboard --artifact-dir`` shows.

- :mod:`~recdiff.study.job`: the Hydra job's phases: plan, prepare, open the study, load the model, grid or search
- :mod:`~recdiff.study.record`: the one path of every trial: claim → measure (:mod:`recdiff.trial`) → record
  (artifacts, attributes, the state told to the study, ``result.json``); claims settled by trial number, reuse
  across the studies of a storage
- :mod:`~recdiff.study.grid`: one grid configuration per job, taken before the model loads
- :mod:`~recdiff.study.search`: the ask/tell loop and its Optuna sampler
- :mod:`~recdiff.study.baselines`: the paper's baselines, recorded once per identity in every grid study
- :mod:`~recdiff.study.claimant`: the machine and process holding a claim; whether that process has ended
- :mod:`~recdiff.study.resources`: each worker's share of the machine's cores (torch threads)
- :mod:`~recdiff.study.interrupt`: SIGTERM as Ctrl-C (the running trial FAIL and re-queued)
- :mod:`~recdiff.study.results`: ``result.json`` and ``study.json``, written atomically; the sweep's token
- :mod:`~recdiff.study.identity`: what a trial measures; trials measured otherwise never share a study
- :mod:`~recdiff.study.connect`: storages by URL, studies by name
- :mod:`~recdiff.study.reconnect`: a database storage that rides out a restarted server
- :mod:`~recdiff.study.storage`: Optuna's storage beneath a study (its private API, touched only there), heartbeats,
  stale trials and their retries, the fenced end of a claimed trial
- :mod:`~recdiff.study.journal`: the journal file, safe against interrupted writes; damage named; repair
- :mod:`~recdiff.study.writable`: write access, checked before anything is recorded
- :mod:`~recdiff.study.sweep_status`: the sweep's exit status (non-zero when every trial failed)

Its interface to the other packages (the sweep's entry point ``sweep.py``, the tune, the tools, the analysis) is
the names below, and only these; everything else is the package's own. They load on first use, each from its module,
so that ``from recdiff.study import open_storage`` imports neither torch nor the trial's measuring modules.
"""

from __future__ import annotations

import importlib
from typing import Any

# name → (module, attribute in it; None: the module itself)
_PUBLIC: dict[str, tuple[str, str | None]] = {
    # the sweep's job and its exit status (sweep.py)
    "run_job": ("recdiff.study.job", "run_job"),
    "sweep_status": ("recdiff.study.sweep_status", None),
    "job_failure": ("recdiff.study.slurm", "job_failure"),
    "interrupt_on_sigterm": ("recdiff.study.interrupt", "interrupt_on_sigterm"),
    "interrupted": ("recdiff.study.interrupt", "interrupted"),
    # storages, studies and journals (the analysis, the soak)
    "open_storage": ("recdiff.study.connect", "open_storage"),
    "sqlalchemy_url": ("recdiff.study.connect", "sqlalchemy_url"),
    "shown": ("recdiff.study.reconnect", "shown"),
    "JournalFile": ("recdiff.study.journal", "JournalFile"),
    "replayed": ("recdiff.study.journal", "replayed"),
    "CLAIMANT_ATTR": ("recdiff.study.storage", "CLAIMANT_ATTR"),
    # what a trial measures (the analysis, the tune)
    "config_hash": ("recdiff.study.identity", "config_hash"),
    "trial_identity": ("recdiff.study.identity", "trial_identity"),
    "identity_key": ("recdiff.study.identity", "key"),
    "differences": ("recdiff.study.identity", "differences"),
    "STUDY_WIDE": ("recdiff.study.identity", "STUDY_WIDE"),
    # a study opened and a trial's one path, claim → measure → record (the tune)
    "open_checked_study": ("recdiff.study.job", "open_checked_study"),
    "check_writable_outputs": ("recdiff.study.writable", "check_writable_outputs"),
    "thread_budget": ("recdiff.study.resources", "thread_budget"),
    "make_sampler": ("recdiff.study.search", "make_sampler"),
    "counts": ("recdiff.study.search", "counts"),
    "fail_stale_trials": ("recdiff.study.storage", "fail_stale_trials"),
    "grid_trial": ("recdiff.study.record", "grid_trial"),
    "claim_asked": ("recdiff.study.record", "claim_asked"),
    "skip_duplicate": ("recdiff.study.record", "skip_duplicate"),
    "holding": ("recdiff.study.storage", "holding"),
    "measure": ("recdiff.study.record", "measure"),
    "record_outcome": ("recdiff.study.record", "record_outcome"),
}


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        module, attr = _PUBLIC[name]
        found = importlib.import_module(module)
        return found if attr is None else getattr(found, attr)
    raise AttributeError(f"module 'recdiff.study' has no attribute {name!r}")


__all__ = list(_PUBLIC)
