"""Grid trials: one configuration per Hydra job, claimed before the model loads.

A job first takes its configuration (:func:`take`): COMPLETE in the study → skipped; held by another live process →
waited for, until it is COMPLETE or its claimant is found dead (at once when it ran on this machine, else once its
heartbeat is older than the grace period) and the configuration is taken over; free → claimed (a RUNNING trial
naming this process, with heartbeats). Only then does the model load, so a configuration runs once however many
workers start it, and a re-run completes what is missing. A configuration whose worker died more than
``study.max_retry`` times is not run again (the sweep ends non-zero, naming it). A configuration measured under the
same identity in another study of the storage is copied instead of measured (``study.reuse``). The paper's baselines
(:mod:`recdiff.study.baselines`) are grid configurations too.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from recdiff.study import claimant
from recdiff.study.baselines import run_baselines
from recdiff.study.claimed import Load, claim, outcome_of, record
from recdiff.study.identity import config_hash
from recdiff.study.record import (SWEEP_TOKEN_ENV, Outcome, claim_trial, holder, retire_waiting, worker_deaths,
                                  write_json, write_result)
from recdiff.study.storage import CLAIMANT_ATTR, fail_stale_trials, holding

if TYPE_CHECKING:
    from recdiff.schema import Config

log = logging.getLogger("recdiff.study")
POLL_S = 2.0               # how often a job waiting for another process's claim looks again
sleep = time.sleep         # tests replace it (with a fake clock)


def take(plan: Config, study: optuna.Study, attrs: dict[str, Any]) -> FrozenTrial | None:
    """This job's configuration: its COMPLETE trial, or this process's claim on it (RUNNING), waiting while another
    live process holds it. None when its worker died more than ``study.max_retry`` times."""
    digest, waiting_for = attrs["config_hash"], None
    while True:
        found = holder(study, digest)
        if found is None:
            if worker_deaths(study, digest) > plan.study.max_retry:
                return None
            if (found := claim(plan, study, attrs)) is not None:
                return found
            continue
        if found.state == TrialState.COMPLETE:
            return found
        if waiting_for != found.number:
            waiting_for = found.number
            log.info("trial %d of study %s runs this configuration (%s): waiting until it completes, or its worker "
                     "is found dead (study.grace_period=%d s)", found.number, study.study_name,
                     claimant.describe(found.system_attrs.get(CLAIMANT_ATTR)), plan.study.grace_period)
        sleep(min(plan.study.heartbeat_interval, POLL_S))
        fail_stale_trials(study)


def _skipped(study: optuna.Study, found: FrozenTrial | None, plan: Config, job_dir: Path,
             digest: str) -> tuple[float, float] | None:
    if found is not None:   # COMPLETE
        retire_waiting(study, found)
        log.info("skipped: identical configuration is trial %d of study %s", found.number, study.study_name)
        write_result(job_dir, found, Outcome(TrialState.COMPLETE, list(found.values), found.user_attrs, []),
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
    """This job's configuration, taken (:func:`take`) before ``load`` runs; with ``baselines_dir``, the paper's
    baselines the study does not hold are recorded first, while the claim is held. ``attrs``: recorded on every trial
    of the job."""
    fail_stale_trials(study)
    common = {"identity": identity, **(attrs or {})}
    attrs = {"config_hash": config_hash(plan), **common}
    load = _once(load)
    trial = take(plan, study, attrs) if plan.study.skip_duplicates else claim_trial(study, plan.grid_params(), attrs)
    if trial is None or trial.state == TrialState.COMPLETE:
        if baselines_dir is not None:
            run_baselines(plan, study, load, baselines_dir, common)
        return _skipped(study, trial, plan, job_dir, attrs["config_hash"])
    with holding(study, trial, plan.study.heartbeat_interval):
        if baselines_dir is not None:
            run_baselines(plan, study, load, baselines_dir, common)
        outcome = outcome_of(plan, study, load, job_dir, attrs)
    _, outcome = record(plan, study, trial, outcome, job_dir, attrs)
    return tuple(outcome.values) if outcome.values else None


def _once(load: Load) -> Load:
    cache: list[Any] = []

    def loaded() -> Any:
        if not cache:
            cache.append(load())
        return cache[0]

    return loaded
