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
from recdiff.study.loop import run_claimed
from recdiff.study.record import SWEEP_TOKEN_ENV, config_hash, holder
from recdiff.study.space import grid_params
from recdiff.study.storage import fail_stale_trials

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
    """Record the baselines of this job's identity that the study does not hold (measured, or copied from another
    study of the storage, see :func:`~recdiff.study.loop.run_claimed`); the numbers of the trials recorded."""
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
        attrs = {"config_hash": digest, "identity": identity, "baseline": True,
                 "sweep_token": os.environ.get(SWEEP_TOKEN_ENV)}
        log.info("baseline %s", baseline_name(sampler, settings))
        done = run_claimed(bcfg, study, work, out_dir / baseline_name(sampler, settings), grid_params(bcfg), attrs)
        if done is not None:
            ran.append(done[0].number)
    return ran
