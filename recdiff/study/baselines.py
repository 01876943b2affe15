"""The paper's baselines, recorded in every grid study (``study.baselines``, default true).

Static AR at r=32 (the reference point of every speed-up and accuracy change), static AR at r=4 and r=8,
adaptive-compute AR and speculative AR, each with the sampler's own defaults (``recdiff/schema.py``, the same as
``conf/sampler/*.yaml``). A baseline is an ordinary grid configuration: the job's config with another ``sampler``
node, so its config hash is the one a recipe's trial of the same settings has (``sweeps=kv_sharing``,
``sweeps=table1``), and it is recorded as a normal trial with the user attribute ``baseline=True``.

Every grid job runs, before its own trial, the baselines of its identity that the study does not hold yet: one
COMPLETE, or RUNNING in another process (claimed, see :func:`~recdiff.study.record.claim_trial`), is reused. So the
first job of a sweep records them, later jobs and later sweeps on the study reuse them, and parallel workers split
them between them. A baseline that failed in this sweep is not tried again by its other jobs (a later sweep does).
"""

from __future__ import annotations

import copy
import logging
import os
from pathlib import Path
from typing import Any

import optuna
from omegaconf import DictConfig, OmegaConf, open_dict
from optuna.trial import TrialState

from recdiff.schema import SAMPLER_SCHEMAS
from recdiff.study.record import (SWEEP_TOKEN_ENV, Outcome, claim_trial, config_hash, evaluate, finish_trial, holder,
                                  log_trial, provenance, write_result)
from recdiff.study.space import grid_params
from recdiff.study.storage import Heartbeat, fail_stale_trials

log = logging.getLogger("recdiff.study")

# (sampler, settings that differ from its defaults): the baselines the paper draws. The first is the reference.
BASELINES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("static", {"r": 32}), ("static", {"r": 4}), ("static", {"r": 8}), ("adaptive", {}), ("speculative", {}),
)


def baseline_name(sampler: str, settings: dict[str, Any]) -> str:
    return "_".join([sampler, *(f"{k}{v}" for k, v in settings.items())])


def baseline_config(cfg: DictConfig, sampler: str, settings: dict[str, Any]) -> DictConfig:
    """The job's config with the baseline's sampler (its schema defaults plus ``settings``)."""
    node = OmegaConf.structured(SAMPLER_SCHEMAS[sampler](**settings))
    out = copy.deepcopy(cfg)
    with open_dict(out):
        out.sampler = node
    return out


def _tried_in_this_sweep(study: optuna.Study, digest: str) -> bool:
    token = os.environ.get(SWEEP_TOKEN_ENV)
    if not token:
        return False
    return any(t.user_attrs.get("config_hash") == digest and t.user_attrs.get("sweep_token") == token
               for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL, TrialState.PRUNED)))


def run_baselines(cfg: DictConfig, study: optuna.Study, work: Any, out_dir: Path,
                  identity: dict[str, Any]) -> list[int]:
    """Record the baselines of this job's identity that the study does not hold; the numbers of the trials run."""
    fail_stale_trials(study)
    ran = []
    for sampler, settings in BASELINES:
        bcfg = baseline_config(cfg, sampler, settings)
        digest = config_hash(bcfg)
        found = holder(study, digest)
        if found is not None:
            log.debug("baseline %s: trial %d (%s)", baseline_name(sampler, settings), found.number, found.state.name)
            continue
        if _tried_in_this_sweep(study, digest):
            continue
        params = grid_params(bcfg)
        attrs = {"config_hash": digest, "identity": identity, "baseline": True,
                 "sweep_token": os.environ.get(SWEEP_TOKEN_ENV)}
        trial = claim_trial(study, params, attrs)
        if (found := holder(study, digest)) is not None and found.number != trial.number:
            # another process claimed it at the same moment, with a lower number: it runs it
            finish_trial(study, trial._trial_id, Outcome(TrialState.PRUNED, None, {
                "duplicate_of": found.number, "prune_reason": f"duplicate of trial {found.number}"}, []), "")
            continue
        job_dir = out_dir / baseline_name(sampler, settings)
        log.info("baseline %s (trial %d)", baseline_name(sampler, settings), trial.number)
        try:
            with Heartbeat(study._storage, trial._trial_id, int(cfg.study.heartbeat_interval)):
                outcome = evaluate(work, bcfg, job_dir)
        except BaseException:   # interrupted: record, re-queue, stop (as a grid trial)
            from recdiff.study.loop import _interrupted

            _interrupted(study, trial._trial_id)
            raise
        outcome.attrs.update(provenance(bcfg, work.device, job_dir), identity=identity, baseline=True)
        trial = finish_trial(study, trial._trial_id, outcome, str(cfg.study.artifact_dir))
        plain = {k: v for k, (v, _) in params.items()}
        log_trial(trial.number, outcome, plain)
        write_result(job_dir, trial, outcome, plain, {"baseline": True})
        ran.append(trial.number)
    return ran
