"""The paper's baselines, recorded in every grid study (``study.baselines``, default true).

Static AR at r=32 (the reference point of every speed-up and accuracy change), static AR at r=4 and r=8,
adaptive-compute AR, speculative AR and LoopSpec (pipelined self-speculative decoding at r=32, lossless: static AR
r=32's answers under greedy decoding, sooner), each with the sampler's own defaults (``recdiff/params.py``; LoopSpec:
r_draft=4, no second readout). A baseline is an
ordinary grid configuration: the job's plan with another sampler, so its config hash is the one a recipe's trial of
the same settings has (``sweeps=kv_sharing``, ``sweeps=table1``), and it is recorded as a normal trial with the user
attribute ``baseline=True``.

Every grid job runs, before its own trial, the baselines of its identity that the study does not hold yet: one
COMPLETE, or RUNNING in another process (claimed, see :func:`~recdiff.study.record.claim`), is reused. So the
first job of a sweep records them, later jobs and later sweeps on the study reuse them, and parallel workers split
them between them. A baseline that failed in this sweep is not tried again by its other jobs (a later sweep does).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import optuna
from optuna.trial import TrialState

from recdiff.params import SAMPLER_PARAMS
from recdiff.study.identity import config_hash
from recdiff.study.record import claim, holder, run_claimed
from recdiff.study.results import SWEEP_TOKEN_ENV
from recdiff.study.storage import fail_stale_trials

if TYPE_CHECKING:
    from recdiff.schema import Config

log = logging.getLogger("recdiff.study")

# (sampler, settings that differ from its defaults): the baselines the paper draws. The first is the reference.
BASELINES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("static", {"r": 32}), ("static", {"r": 4}), ("static", {"r": 8}), ("adaptive", {}), ("speculative", {}),
    ("loopspec", {"r": 32}),
)


def baseline_name(sampler: str, settings: dict[str, Any]) -> str:
    return "_".join([sampler, *(f"{k}{v}" for k, v in settings.items())])


def baseline_plan(plan: Config, sampler: str, settings: dict[str, Any]) -> Config:
    """The job's plan with the baseline's sampler (its defaults plus ``settings``)."""
    return plan.with_sampler(SAMPLER_PARAMS[sampler](**settings))


def _tried_in_this_sweep(study: optuna.Study, digest: str) -> bool:
    token = os.environ.get(SWEEP_TOKEN_ENV)
    if not token:
        return False
    return any(t.user_attrs.get("config_hash") == digest and t.user_attrs.get("sweep_token") == token
               for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL, TrialState.PRUNED)))


def run_baselines(plan: Config, study: optuna.Study, load: Callable[[], Any], out_dir: Path,
                  common: dict[str, Any]) -> list[int]:
    """Record the baselines of this job's identity that the study does not hold (measured, or copied from another
    study of the storage, see :func:`~recdiff.study.record.measure`); the numbers of the trials recorded. A baseline
    another process claimed at the same moment is left to it.
    ``load``: the workload, called only when a baseline is measured; ``common``: attributes of every trial of the job
    (``identity``, ...)."""
    fail_stale_trials(study)
    ran = []
    for sampler, settings in BASELINES:
        bplan = baseline_plan(plan, sampler, settings)
        digest = config_hash(bplan)
        found = holder(study, digest)
        if found is not None:
            log.debug("baseline %s: trial %d (%s)", baseline_name(sampler, settings), found.number, found.state.name)
            continue
        if _tried_in_this_sweep(study, digest):
            continue
        attrs = {"config_hash": digest, **common, "baseline": True, "sweep_token": os.environ.get(SWEEP_TOKEN_ENV)}
        log.info("baseline %s", baseline_name(sampler, settings))
        trial = claim(bplan, study, attrs)
        if trial is None:
            continue
        done, _ = run_claimed(bplan, study, trial, load, out_dir / baseline_name(sampler, settings), attrs,
                              reuse=bplan.study.reuse)
        ran.append(done.number)
    return ran
