"""Grid trials: one configuration per Hydra job, taken before the model loads.

A job first takes its configuration (:func:`~recdiff.study.record.take`): COMPLETE in the study → skipped; held by
another live process → waited for, until it is COMPLETE or its claimant is found dead and the configuration is taken
over; free → claimed. Only then does the model load, so a configuration runs once however many workers start it, and
a re-run completes what is missing. A configuration whose worker died more than ``study.max_retry`` times is not run
again (the sweep ends non-zero, naming it). A job whose claim was taken over while it was away (stopped for longer
than the grace period) drops its result and takes its configuration again: it waits for the new holder. A
configuration measured under the same identity in another study of the storage is copied instead of measured
(``study.reuse``). The paper's baselines (:mod:`recdiff.study.baselines`) are
grid configurations too, recorded first, while the job holds its claim.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from recdiff.study.baselines import run_baselines
from recdiff.study.identity import config_hash
from recdiff.study.record import Load, claim_trial, measure, record_outcome, retire_waiting, take, worker_deaths
from recdiff.study.results import SWEEP_TOKEN_ENV, write_json, write_result
from recdiff.study.storage import fail_stale_trials, holding
from recdiff.trial.outcome import Outcome, State

if TYPE_CHECKING:
    from recdiff.schema import Config

log = logging.getLogger("recdiff.study")


def _skipped(study: optuna.Study, found: FrozenTrial | None, plan: Config, job_dir: Path,
             digest: str) -> tuple[float, float] | None:
    if found is not None:   # COMPLETE
        retire_waiting(study, found)
        log.info("skipped: identical configuration is trial %d of study %s", found.number, study.study_name)
        write_result(job_dir, found, Outcome(State.COMPLETE, list(found.values), found.user_attrs, []),
                     found.params, {"skipped_duplicate": True})
        return tuple(found.values)
    deaths = worker_deaths(study, digest)
    log.warning("not run: this configuration's worker died %d times (study.max_retry=%d)", deaths,
                plan.study.max_retry)
    write_json(job_dir / "result.json", {
        "params": {k: v for k, (v, _) in plan.grid_params().items()}, "state": "SKIPPED", "trial_number": None,
        "retries_exhausted": deaths, "config_hash": digest, "sweep_token": os.environ.get(SWEEP_TOKEN_ENV)})
    return None


def run_grid_trial(plan: Config, study: optuna.Study, load: Load, job_dir: Path, identity: dict[str, Any],
                   baselines_dir: Path | None = None,
                   attrs: dict[str, Any] | None = None) -> tuple[float, float] | None:
    """This job's configuration, taken before ``load`` runs; with ``baselines_dir``, the paper's baselines the study
    does not hold are recorded first, while the claim is held. ``attrs``: recorded on every trial of the job."""
    fail_stale_trials(study)
    common = {"identity": identity, **(attrs or {})}
    attrs = {"config_hash": config_hash(plan), **common}
    load = _once(load)
    while True:
        trial = (take(plan, study, attrs) if plan.study.skip_duplicates
                 else claim_trial(study, plan.grid_params(), attrs))
        if trial is None or trial.state == TrialState.COMPLETE:
            if baselines_dir is not None:
                run_baselines(plan, study, load, baselines_dir, common)
            return _skipped(study, trial, plan, job_dir, attrs["config_hash"])
        with holding(study, trial, plan.study.heartbeat_interval):
            if baselines_dir is not None:
                run_baselines(plan, study, load, baselines_dir, common)
            outcome = measure(plan, study, load, job_dir, attrs, reuse=plan.study.reuse)
        if record_outcome(plan, study, trial, outcome, job_dir, attrs) is not None or not plan.study.skip_duplicates:
            return tuple(outcome.values) if outcome.values else None
        # the claim was taken over while this worker was away: the configuration is another worker's now; wait for
        # it as for any configuration held elsewhere (take)


def _once(load: Load) -> Load:
    cache: list[Any] = []

    def loaded() -> Any:
        if not cache:
            cache.append(load())
        return cache[0]

    return loaded
