"""Optuna side of the sweeps (docs/architecture.md, "Studies"; docs/sweeps.md, "Failure semantics").

Objectives ``accuracy`` and ``tokens_per_s`` (both maximised, named with ``set_metric_names``); parameters named as
the config keys with distributions from ``study.space``; user attributes with the measurements, the full resolved
config, its ``identity`` (what it measures apart from the sampler), git commit, device, library versions and the
output directory. Each trial's stability picture and per-sample table are uploaded as artifacts
(``study.artifact_dir``) that ``optuna-dashboard --artifact-dir`` shows.

- :mod:`~recdiff.study.storage`: storages, studies, heartbeats, stale trials and their retries
- :mod:`~recdiff.study.journal`: the journal file, safe against interrupted writes; damage named; repair
- :mod:`~recdiff.study.space`: distributions, grid parameters, the search's sampler
- :mod:`~recdiff.study.identity`: what a trial measures; trials measured otherwise never share a study
- :mod:`~recdiff.study.preflight`: every check that needs no model, before anything loads
- :mod:`~recdiff.study.record`: outcomes, provenance, claims, artifacts, ``result.json``
- :mod:`~recdiff.study.loop`: the Hydra job: one grid trial or an ask/tell loop
- :mod:`~recdiff.study.baselines`: the paper's baselines, recorded once per identity in every grid study
- :mod:`~recdiff.study.sweep_status`: the sweep's exit status (non-zero when every trial failed) and closing table
"""

from recdiff.study.identity import check_identity, identity_from_config, trial_identity
from recdiff.study.journal import JournalFile, repair
from recdiff.study.loop import RETRIED_KINDS, count_trials, run_grid_trial, run_job, run_search
from recdiff.study.record import (VOLATILE_KEYS, Outcome, claim_trial, config_dict, config_hash, evaluate,
                                  find_duplicate, finish_trial, provenance, upload_artifacts, write_json)
from recdiff.study.space import distribution, grid_params, make_sampler, recorded_param, search_space
from recdiff.study.storage import (HEARTBEAT_ATTR, Heartbeat, HeartbeatJournalStorage, RetryStaleTrial,
                                   fail_stale_trials, load_study, open_storage, open_study, resolve_storage_url)

__all__ = [
    "check_identity", "identity_from_config", "trial_identity", "JournalFile", "repair", "RETRIED_KINDS",
    "count_trials", "run_grid_trial", "run_job", "run_search", "VOLATILE_KEYS", "Outcome", "claim_trial",
    "config_dict", "config_hash", "evaluate", "find_duplicate", "finish_trial", "provenance", "upload_artifacts",
    "write_json", "distribution", "grid_params", "make_sampler", "recorded_param", "search_space",
    "HEARTBEAT_ATTR", "Heartbeat", "HeartbeatJournalStorage", "RetryStaleTrial", "fail_stale_trials", "load_study",
    "open_storage", "open_study", "resolve_storage_url",
]
