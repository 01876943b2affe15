"""A claimed grid configuration: the claim, its outcome (measured, or copied from another study of the storage that
measured it under the same identity: ``study.reuse``) and its record. Two claims made at the same moment are settled
by trial number: the lower one runs, the other is PRUNED as its duplicate."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import optuna
from optuna.trial import FrozenTrial, TrialState

from recdiff.study.record import (Outcome, claim_trial, evaluate, finish_trial, holder, log_trial, provenance,
                                  retire_waiting, reusable, reused_outcome, write_result)
from recdiff.study.storage import holding

if TYPE_CHECKING:
    from recdiff.schema import Config

log = logging.getLogger("recdiff.study")
Load = Callable[[], Any]   # the job's workload, loaded on first use


def claim(plan: Config, study: optuna.Study, attrs: dict[str, Any]) -> FrozenTrial | None:
    """A claim on the plan's configuration; None when another process claimed it at the same moment with a lower
    trial number (it runs; this claim is PRUNED as its duplicate)."""
    trial = claim_trial(study, plan.grid_params(), attrs)
    found = holder(study, attrs["config_hash"])
    if found is None or found.number == trial.number:
        return trial
    finish_trial(study, trial, Outcome(TrialState.PRUNED, None, {
        "duplicate_of": found.number, "prune_reason": f"duplicate of trial {found.number}"}, []), "")
    return None


def outcome_of(plan: Config, study: optuna.Study, load: Load, job_dir: Path, attrs: dict[str, Any]) -> Outcome:
    """Copied from another study of the storage that measured it under the same identity (``study.reuse``), else
    measured."""
    source = reusable(study, attrs["config_hash"], attrs["identity"]) if plan.study.reuse else None
    if source is not None:
        log.info("reused trial %d of study %s (same configuration and identity)", source[1].number, source[0])
        return reused_outcome(*source)
    work = load()
    outcome = evaluate(work, plan.trial, job_dir)
    outcome.attrs.update(provenance(plan, work.device, job_dir, work.threads))
    return outcome


def record(plan: Config, study: optuna.Study, trial: FrozenTrial, outcome: Outcome, job_dir: Path,
           attrs: dict[str, Any]) -> tuple[FrozenTrial, Outcome]:
    outcome.attrs.update(attrs)
    trial = finish_trial(study, trial, outcome, plan.study.artifact_dir)
    if trial.state == TrialState.COMPLETE:
        retire_waiting(study, trial)
    plain = {k: v for k, (v, _) in plan.grid_params().items()}
    log_trial(trial.number, outcome, plain)
    write_result(job_dir, trial, outcome, plain, {"baseline": True} if attrs.get("baseline") else None)
    return trial, outcome


def run_claimed(plan: Config, study: optuna.Study, load: Load, job_dir: Path,
                attrs: dict[str, Any]) -> tuple[FrozenTrial, Outcome] | None:
    """Claim a configuration and record it (a baseline: one that another process holds is left to it); None when
    another process holds it."""
    trial = claim(plan, study, attrs)
    if trial is None:
        return None
    with holding(study, trial, plan.study.heartbeat_interval):
        outcome = outcome_of(plan, study, load, job_dir, attrs)
    return record(plan, study, trial, outcome, job_dir, attrs)
