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
"""

from recdiff.study.baselines import BASELINES, run_baselines
from recdiff.study.connect import load_study, open_storage, open_study, resolve_storage_url
from recdiff.study.grid import run_grid_trial
from recdiff.study.identity import check_identity, config_hash, identity_from_config, trial_identity
from recdiff.study.job import run_job
from recdiff.study.journal import JournalFile, repair
from recdiff.study.record import (
                                  claim,
                                  claim_asked,
                                  claim_trial,
                                  find_duplicate,
                                  holder,
                                  measure,
                                  record_outcome,
                                  run_claimed,
                                  take,
                                  tell,
                                  upload_artifacts,
)
from recdiff.study.results import write_json, write_result
from recdiff.study.search import RETRIED_KINDS, count_trials, make_sampler, run_search
from recdiff.study.storage import (
                                  CLAIM_ATTR,
                                  CLAIMANT_ATTR,
                                  HEARTBEAT_ATTR,
                                  Heartbeat,
                                  HeartbeatJournalStorage,
                                  RetryStaleTrial,
                                  fail_stale_trials,
                                  finish_claim,
                                  holding,
                                  record_heartbeat,
                                  storage_of,
                                  trial_id,
)

__all__ = [
    "BASELINES", "run_baselines", "load_study", "open_storage", "open_study", "resolve_storage_url", "run_grid_trial",
    "check_identity", "config_hash", "identity_from_config", "trial_identity", "run_job", "JournalFile", "repair",
    "claim", "claim_asked", "claim_trial", "find_duplicate", "holder", "measure", "record_outcome", "run_claimed",
    "take", "tell", "upload_artifacts", "write_json", "write_result", "RETRIED_KINDS", "count_trials", "make_sampler",
    "run_search", "CLAIM_ATTR", "CLAIMANT_ATTR", "HEARTBEAT_ATTR", "Heartbeat", "HeartbeatJournalStorage",
    "RetryStaleTrial", "fail_stale_trials", "finish_claim", "holding", "record_heartbeat", "storage_of", "trial_id",
]
