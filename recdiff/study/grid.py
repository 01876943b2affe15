"""Grid trials: one configuration per Hydra job, claimed before it is measured.

A job claims its configuration first (a RUNNING trial with heartbeats), so a configuration COMPLETE in the study, or
running in another process, is skipped; a re-run completes what is missing, and a crashed claimant's configuration is
run again once its heartbeat is older than the grace period. A configuration measured under the same identity in
another study of the storage is copied instead of measured (``study.reuse``). The paper's baselines
(:mod:`recdiff.study.baselines`) are grid configurations too.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from recdiff.study.identity import config_hash
from recdiff.study.record import (SWEEP_TOKEN_ENV, Outcome, claim_trial, evaluate, finish_trial, holder, log_trial,
                                  provenance, reusable, reused_outcome, write_json, write_result)
from recdiff.study.storage import Heartbeat, fail_interrupted, fail_stale_trials

if TYPE_CHECKING:
    from recdiff.schema import Config

log = logging.getLogger("recdiff.study")


def _skip(study: optuna.Study, found: FrozenTrial, job_dir: Path) -> tuple[float, float] | None:
    if found.state == TrialState.COMPLETE:
        log.info("skipped: identical configuration is trial %d of study %s", found.number, study.study_name)
        write_result(job_dir, found, Outcome(TrialState.COMPLETE, list(found.values), found.user_attrs, []),
                     found.params, {"skipped_duplicate": True})
        return tuple(found.values)
    log.info("skipped: trial %d of study %s runs this configuration in another process", found.number,
             study.study_name)
    write_json(job_dir / "result.json", {"params": found.params, "state": "SKIPPED", "trial_number": found.number,
                                         "running_elsewhere": True, "sweep_token": os.environ.get(SWEEP_TOKEN_ENV)})
    return None


def run_claimed(plan: Config, study: optuna.Study, work: Any, job_dir: Path,
                attrs: dict[str, Any]) -> tuple[FrozenTrial, Outcome] | None:
    """Claim a grid configuration, then measure it, or copy it from another study of the storage that measured it
    under the same identity (``study.reuse``), and record it. None when another process holds it (see ``holder``)."""
    digest, params = attrs["config_hash"], plan.grid_params()
    trial = claim_trial(study, params, attrs)
    if (found := holder(study, digest)) is not None and found.number != trial.number:
        # another process claimed it at the same moment, with a lower number: it runs, this claim steps back
        finish_trial(study, trial, Outcome(TrialState.PRUNED, None, {
            "duplicate_of": found.number, "prune_reason": f"duplicate of trial {found.number}"}, []), "")
        return None
    source = reusable(study, digest, attrs["identity"]) if plan.study.reuse else None
    if source is not None:
        outcome = reused_outcome(*source)
        log.info("trial %d: reused trial %d of study %s (same configuration and identity)", trial.number,
                 source[1].number, source[0])
    else:
        try:
            with Heartbeat(study, trial, plan.study.heartbeat_interval):
                outcome = evaluate(work, plan.trial, job_dir)
        except BaseException:   # interrupted (Ctrl-C, SIGTERM): record, re-queue, stop
            fail_interrupted(study, trial)
            raise
        outcome.attrs.update(provenance(plan, work.device, job_dir))
    outcome.attrs.update(attrs)
    trial = finish_trial(study, trial, outcome, plan.study.artifact_dir)
    plain = {k: v for k, (v, _) in params.items()}
    log_trial(trial.number, outcome, plain)
    write_result(job_dir, trial, outcome, plain, {"baseline": True} if attrs.get("baseline") else None)
    return trial, outcome


def run_grid_trial(plan: Config, study: optuna.Study, work: Any, job_dir: Path,
                   identity: dict[str, Any]) -> tuple[float, float] | None:
    """This job's configuration: skipped when the study holds it, else claimed and measured (or reused)."""
    fail_stale_trials(study)
    digest = config_hash(plan)
    if plan.study.skip_duplicates and (found := holder(study, digest)) is not None:
        return _skip(study, found, job_dir)
    done = run_claimed(plan, study, work, job_dir, {"config_hash": digest, "identity": identity})
    if done is None:
        return _skip(study, holder(study, digest), job_dir)
    _, outcome = done
    return tuple(outcome.values) if outcome.values else None
