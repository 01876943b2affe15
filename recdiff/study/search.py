"""Searched studies: every Hydra job runs an ask/tell loop until the study holds ``study.n_trials`` counted trials.

Counted: COMPLETE, FAIL with a reason of its own, PRUNED as invalid; several jobs may share one study. A job whose
ask comes after other jobs took the last places prunes it (``surplus``, not counted) and waits for theirs. A trial
takes the study's one path (:mod:`~recdiff.study.record`): asked and claimed, measured, recorded.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from recdiff.study.identity import config_hash
from recdiff.study.record import claim_asked, run_claimed, skip_duplicate, tell
from recdiff.study.storage import fail_stale_trials, storage_of, trial_id
from recdiff.trial.outcome import Outcome, State

if TYPE_CHECKING:
    from recdiff.schema import Config, StudyConfig

log = logging.getLogger("recdiff.study")

# Trials failed because their worker went away: not counted towards n_trials, re-queued instead.
RETRIED_KINDS = ("worker_died", "interrupted")


def make_sampler(spec: StudyConfig, worker: int = 0) -> optuna.samplers.BaseSampler:
    """The search's Optuna sampler (``study.algorithm``); each worker seeds its own."""
    from recdiff.errors import RecdiffError

    algo = spec.algorithm.value
    seed = None if spec.seed is None else spec.seed + worker   # workers must not propose alike
    if algo == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=spec.population_size, seed=seed)
    if algo == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if algo == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    if algo == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    space = {}
    for name in spec.search:   # algo == "grid"
        p = spec.space[name]
        points = p.values if p.values is not None else p.choices
        if points is None:
            raise RecdiffError(f"study.algorithm=grid needs study.space.{name}.values")
        space[name] = list(points)
    return optuna.samplers.GridSampler(space, seed=seed)


def counts(t: FrozenTrial) -> bool:
    """Whether a finished trial counts towards n_trials: COMPLETE, FAIL with a reason of its own, PRUNED as invalid.
    Not counted: WAITING or RUNNING, duplicates, surplus asks, trials lost with a worker."""
    if t.state == TrialState.COMPLETE:
        return True
    if t.state == TrialState.FAIL:
        return t.user_attrs.get("fail_kind") not in RETRIED_KINDS + (None,)
    return t.state == TrialState.PRUNED and not {"duplicate_of", "surplus"} & t.user_attrs.keys()


def count_trials(study: optuna.Study, before: int | None = None) -> tuple[int, int]:
    """(counted towards n_trials, RUNNING); with ``before``, only RUNNING trials numbered below it."""
    done = running = 0
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.RUNNING:
            running += before is None or t.number < before
        else:
            done += counts(t)
    return done, running


def run_search(plan: Config, study: optuna.Study, work: Any, job_dir: Path, identity: dict[str, Any]) -> None:
    space, spec = plan.search_space(), plan.study
    duplicates_in_a_row = 0
    while True:
        fail_stale_trials(study)
        done, running = count_trials(study)
        if done >= spec.n_trials:
            log.info("study %s holds %d counted trials (n_trials=%d): done", study.study_name, done, spec.n_trials)
            return
        if done + running >= spec.n_trials:   # the rest is running elsewhere: wait for it to finish or go stale
            time.sleep(min(spec.heartbeat_interval, 2))
            continue
        if isinstance(study.sampler, optuna.samplers.GridSampler) and study.sampler.is_exhausted(study):
            log.info("grid exhausted after %d trials", done)
            return
        trial = claim_asked(study, study.ask(space))
        if trial is None:   # failed as stale before it was claimed (this worker was away): re-queued for another
            continue
        # Workers count, then ask: two may ask for the last place. The earlier-numbered trial keeps it.
        done, ahead = count_trials(study, before=trial.number)
        if done + ahead >= spec.n_trials:
            tell(study, trial, Outcome(State.PRUNED, None, {
                "surplus": True, "prune_reason": f"n_trials={spec.n_trials} reached by other workers"}, []), "")
            log.info("trial %d stepped back: the last places are taken by other workers", trial.number)
            continue
        trial_plan = plan.with_sampler(**trial.params)
        attrs = {"config_hash": config_hash(trial_plan), "identity": identity}
        try:
            for k, v in attrs.items():   # seen by other workers' duplicate checks from now on
                storage_of(study).set_trial_user_attr(trial_id(trial), k, v)
        except optuna.exceptions.UpdateFinishedTrialError:   # failed as stale meanwhile, as above
            continue
        dup = skip_duplicate(study, trial, attrs["config_hash"]) if spec.skip_duplicates else None
        if dup is not None:
            duplicates_in_a_row += 1
            log.info("trial %d skipped: duplicate of trial %d", trial.number, dup.number)
            if duplicates_in_a_row >= spec.max_duplicates:
                log.info("%d duplicate proposals in a row: the search space looks exhausted", duplicates_in_a_row)
                return
            continue
        duplicates_in_a_row = 0
        # study.reuse is a grid setting (conf/study/grid.yaml): a search measures what it proposes
        run_claimed(trial_plan, study, trial, lambda: work, job_dir / "trials" / f"{trial.number:04d}", attrs,
                    reuse=False)
