"""Optuna side of the sweeps (docs/architecture.md, "Studies"; docs/sweeps.md, "Failure semantics").

Objectives ``accuracy`` and ``tokens_per_s`` (both maximised, named with ``set_metric_names``); parameters named as
the config keys with distributions from ``study.space``; user attributes with the measurements, the full resolved
config, its ``identity`` (what it measures apart from the sampler), git commit, device, library versions and the
output directory. Each trial's stability picture and per-sample table are uploaded as artifacts
(``study.artifact_dir``) that ``optuna-dashboard --artifact-dir`` shows.

- :mod:`~recdiff.study.job`: the Hydra job's phases: plan, prepare, open the study, load the model, grid or search
- :mod:`~recdiff.study.grid`: one grid configuration per job, taken before the model loads
- :mod:`~recdiff.study.claimed`: a claimed configuration measured (or reused) and recorded
- :mod:`~recdiff.study.claimant`: the machine and process holding a claim; whether that process has ended
- :mod:`~recdiff.study.resources`: each worker's share of the machine's cores (torch threads)
- :mod:`~recdiff.study.baselines`: the paper's baselines, recorded once per identity in every grid study
- :mod:`~recdiff.study.search`: the ask/tell loop and its Optuna sampler
- :mod:`~recdiff.study.record`: outcomes, provenance, claims, artifacts, ``result.json``
- :mod:`~recdiff.study.identity`: what a trial measures; trials measured otherwise never share a study
- :mod:`~recdiff.study.connect`: storages by URL, studies by name
- :mod:`~recdiff.study.reconnect`: a database storage that rides out a restarted server
- :mod:`~recdiff.study.storage`: Optuna's storage beneath a study (its private API, touched only there), heartbeats,
  stale trials and their retries
- :mod:`~recdiff.study.journal`: the journal file, safe against interrupted writes; damage named; repair
- :mod:`~recdiff.study.writable`: write access, checked before anything is recorded
- :mod:`~recdiff.study.sweep_status`: the sweep's exit status (non-zero when every trial failed)
"""

from recdiff.study.baselines import BASELINES, run_baselines
from recdiff.study.connect import load_study, open_storage, open_study, resolve_storage_url
from recdiff.study.claimed import run_claimed
from recdiff.study.grid import run_grid_trial
from recdiff.study.identity import check_identity, config_hash, identity_from_config, trial_identity
from recdiff.study.job import run_job
from recdiff.study.journal import JournalFile, repair
from recdiff.study.record import (Outcome, claim_trial, evaluate, find_duplicate, finish_trial, holder, provenance,
                                  upload_artifacts, write_json)
from recdiff.study.search import RETRIED_KINDS, count_trials, make_sampler, run_search
from recdiff.study.storage import (CLAIMANT_ATTR, HEARTBEAT_ATTR, Heartbeat, HeartbeatJournalStorage, RetryStaleTrial,
                                   fail_stale_trials, holding, record_heartbeat, storage_of, trial_id)

__all__ = [
    "BASELINES", "run_baselines", "load_study", "open_storage", "open_study", "resolve_storage_url", "run_claimed",
    "run_grid_trial", "check_identity", "config_hash", "identity_from_config", "trial_identity", "run_job",
    "JournalFile", "repair", "Outcome", "claim_trial", "evaluate", "find_duplicate", "finish_trial", "holder",
    "provenance", "upload_artifacts", "write_json", "RETRIED_KINDS", "count_trials", "make_sampler", "run_search",
    "CLAIMANT_ATTR", "HEARTBEAT_ATTR", "Heartbeat", "holding", "HeartbeatJournalStorage", "RetryStaleTrial", "fail_stale_trials",
    "record_heartbeat", "storage_of", "trial_id",
]
