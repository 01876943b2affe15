"""The Hydra job: check, open the study, then one grid trial or an ask/tell loop.

- ``grid``: every Hydra job runs one trial. It claims the configuration first (a RUNNING trial with heartbeats), so
  a configuration COMPLETE in the study, or running in another process, is skipped; a re-run completes what is
  missing, and a crashed claimant's configuration is run again once its heartbeat is older than the grace period.
  With ``study.baselines`` (default) a grid job first records the paper's baselines of its identity that the study
  does not hold yet (:mod:`recdiff.study.baselines`).
- ``search``: every job runs an ask/tell loop until the study holds ``study.n_trials`` counted trials (COMPLETE,
  FAIL with a reason of its own, PRUNED as invalid); several jobs may share one study. A job whose ask comes after
  other jobs took the last places prunes it (``surplus``, not counted) and waits for theirs.
"""

from __future__ import annotations

import copy
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState
from omegaconf import DictConfig

from recdiff.study.identity import check_identity, identity_from_config, weights_digest
from recdiff.study.preflight import check_run, check_sampler, check_study, check_writable_outputs
from recdiff.study.record import (SWEEP_TOKEN_ENV, Outcome, claim_trial, config_dict, config_hash, evaluate, find_duplicate,
                                  finish_trial, holder, log_trial, provenance, reusable, reused_outcome,
                                  store_artifacts, write_json, write_result)
from recdiff.study.space import grid_params, make_sampler, search_space
from recdiff.study.storage import Heartbeat, fail_stale_trials, open_storage, open_study, resolve_storage_url

log = logging.getLogger("recdiff.study")

# Trials failed because their worker went away: not counted towards n_trials, re-queued instead.
RETRIED_KINDS = ("worker_died", "interrupted")


def _interrupted(study: optuna.Study, trial_id: int) -> None:
    """Ctrl-C / SIGTERM during a trial: FAIL it as interrupted and re-queue it."""
    storage = study._storage
    for k, v in {"fail_kind": "interrupted", "fail_reason": "interrupted"}.items():
        storage.set_trial_user_attr(trial_id, k, v)
    storage.set_trial_state_values(trial_id, TrialState.FAIL)
    callback = getattr(storage, "get_heartbeat_stale_trial_callback", lambda: None)()
    if callback is not None:
        callback(study, copy.deepcopy(storage.get_trial(trial_id)))


# ---------------------------------------------------------------------------------------------- grid mode


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


def run_claimed(cfg: DictConfig, study: optuna.Study, work: Any, job_dir: Path, params: dict[str, Any],
                attrs: dict[str, Any]) -> tuple[FrozenTrial, Outcome] | None:
    """Claim a grid configuration, then measure it, or copy it from another study of the storage that measured it
    under the same identity (``study.reuse``), and record it. None when another process holds it (see ``holder``)."""
    digest = attrs["config_hash"]
    trial = claim_trial(study, params, attrs)
    if (found := holder(study, digest)) is not None and found.number != trial.number:
        # another process claimed it at the same moment, with a lower number: it runs, this claim steps back
        finish_trial(study, trial._trial_id, Outcome(TrialState.PRUNED, None, {
            "duplicate_of": found.number, "prune_reason": f"duplicate of trial {found.number}"}, []), "")
        return None
    source = reusable(study, digest, attrs["identity"]) if cfg.study.get("reuse", True) else None
    if source is not None:
        outcome = reused_outcome(*source)
        log.info("trial %d: reused trial %d of study %s (same configuration and identity)", trial.number,
                 source[1].number, source[0])
    else:
        try:
            with Heartbeat(study._storage, trial._trial_id, int(cfg.study.heartbeat_interval)):
                outcome = evaluate(work, cfg, job_dir)
        except BaseException:   # interrupted (Ctrl-C, SIGTERM): record, re-queue, stop
            _interrupted(study, trial._trial_id)
            raise
        outcome.attrs.update(provenance(cfg, work.device, job_dir))
    outcome.attrs.update(attrs)
    trial = finish_trial(study, trial._trial_id, outcome, str(cfg.study.artifact_dir))
    plain = {k: v for k, (v, _) in params.items()}
    log_trial(trial.number, outcome, plain)
    write_result(job_dir, trial, outcome, plain, {"baseline": True} if attrs.get("baseline") else None)
    return trial, outcome


def run_grid_trial(cfg: DictConfig, study: optuna.Study, work: Any, job_dir: Path,
                   identity: dict[str, Any] | None = None) -> tuple[float, float] | None:
    fail_stale_trials(study)
    params = grid_params(cfg)
    digest = config_hash(cfg)
    skip = bool(cfg.study.skip_duplicates)
    if skip and (found := holder(study, digest)) is not None:
        return _skip(study, found, job_dir)
    identity = identity or identity_from_config(config_dict(cfg))
    done = run_claimed(cfg, study, work, job_dir, params, {"config_hash": digest, "identity": identity})
    if done is None:
        return _skip(study, holder(study, digest), job_dir)
    _, outcome = done
    return tuple(outcome.values) if outcome.values else None


# -------------------------------------------------------------------------------------------- search mode


def count_trials(study: optuna.Study, before: int | None = None) -> tuple[int, int]:
    """(counted towards n_trials, RUNNING); with ``before``, only RUNNING trials numbered below it. Not counted:
    WAITING, duplicates, surplus asks, trials lost with a worker."""
    done = running = 0
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.RUNNING:
            running += before is None or t.number < before
        elif t.state == TrialState.COMPLETE:
            done += 1
        elif t.state == TrialState.FAIL and t.user_attrs.get("fail_kind") not in RETRIED_KINDS + (None,):
            done += 1
        elif t.state == TrialState.PRUNED and not {"duplicate_of", "surplus"} & t.user_attrs.keys():
            done += 1
    return done, running


def run_search(cfg: DictConfig, study: optuna.Study, work: Any, job_dir: Path,
               identity: dict[str, Any] | None = None) -> None:
    space = search_space(cfg)
    n_trials = int(cfg.study.n_trials)
    interval = int(cfg.study.heartbeat_interval)
    duplicates_in_a_row = 0
    while True:
        fail_stale_trials(study)
        done, running = count_trials(study)
        if done >= n_trials:
            log.info("study %s holds %d counted trials (n_trials=%d): done", study.study_name, done, n_trials)
            return
        if done + running >= n_trials:   # the rest is running elsewhere: wait for it to finish or go stale
            time.sleep(min(interval, 2))
            continue
        if isinstance(study.sampler, optuna.samplers.GridSampler) and study.sampler.is_exhausted(study):
            log.info("grid exhausted after %d trials", done)
            return
        trial = study.ask(space)
        # Workers count, then ask: two may ask for the last place. The earlier-numbered trial keeps it.
        done, ahead = count_trials(study, before=trial.number)
        if done + ahead >= n_trials:
            trial.set_user_attr("surplus", True)
            trial.set_user_attr("prune_reason", f"n_trials={n_trials} reached by other workers")
            study.tell(trial, state=TrialState.PRUNED)
            log.info("trial %d stepped back: the last places are taken by other workers", trial.number)
            continue
        trial_dir = job_dir / "trials" / f"{trial.number:04d}"
        tcfg = copy.deepcopy(cfg)
        for k, v in trial.params.items():
            tcfg.sampler[k] = v
        digest = config_hash(tcfg)
        trial.set_user_attr("config_hash", digest)
        identity = identity or identity_from_config(config_dict(tcfg))
        trial.set_user_attr("identity", identity)
        params = dict(trial.params)
        if cfg.study.skip_duplicates:
            dup = find_duplicate(study, digest, exclude=trial.number)
            if dup is not None:
                duplicates_in_a_row += 1
                trial.set_user_attr("duplicate_of", dup.number)
                trial.set_user_attr("prune_reason", f"duplicate of trial {dup.number}")
                study.tell(trial, state=TrialState.PRUNED)
                log.info("trial %d skipped: duplicate of trial %d", trial.number, dup.number)
                if duplicates_in_a_row >= int(cfg.study.max_duplicates):
                    log.info("%d duplicate proposals in a row: the search space looks exhausted", duplicates_in_a_row)
                    return
                continue
        duplicates_in_a_row = 0
        try:
            with Heartbeat(study._storage, trial._trial_id, interval):
                outcome = evaluate(work, tcfg, trial_dir)
        except BaseException:   # interrupted (Ctrl-C, SIGTERM): record, re-queue, stop
            _interrupted(study, trial._trial_id)
            raise
        outcome.attrs.update(provenance(tcfg, work.device, trial_dir), identity=identity)
        store_artifacts(study._storage, trial._trial_id, outcome, str(cfg.study.artifact_dir))
        for k, v in outcome.attrs.items():
            trial.set_user_attr(k, v)
        try:
            study.tell(trial, outcome.values if outcome.state == TrialState.COMPLETE else None, state=outcome.state)
        except (optuna.exceptions.UpdateFinishedTrialError, RuntimeError) as e:
            log.warning("trial %d was failed by another worker meanwhile (%s)", trial.number, e)
        log_trial(trial.number, outcome, params)
        write_result(trial_dir, study._storage.get_trial(trial._trial_id), outcome, params)


# ----------------------------------------------------------------------------------------------- the job


def _sweep_dir() -> tuple[Path, Path]:
    """(this job's output dir, the dir of the whole run/multirun)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    job = Path(hc.runtime.output_dir)
    top = Path(hc.sweep.dir) if hc.mode == RunMode.MULTIRUN else Path(hc.run.dir)
    return job, top


def _sigterm_to_interrupt() -> None:
    if threading.current_thread() is threading.main_thread():
        def handler(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt(f"signal {signum}")

        signal.signal(signal.SIGTERM, handler)


def run_job(cfg: DictConfig) -> tuple[float, float] | None:
    """The Hydra task. Every check that needs no model comes first (settings, write access, the study's identity);
    a failing one raises :class:`RecdiffError` and records nothing. Then the model loads and the trial(s) run."""
    from recdiff.load import weight_files
    from recdiff.trial import Workload

    optuna.logging.set_verbosity(optuna.logging.WARNING)   # one line per trial is ours
    job_dir, top_dir = _sweep_dir()
    s = cfg.study
    mode = getattr(s.mode, "value", s.mode)
    check_study(s, mode)
    check_run(cfg.run)
    check_sampler(cfg, tuple(search_space(cfg)) if mode == "search" else ())
    if mode == "grid":
        grid_params(cfg)
    check_writable_outputs(cfg, job_dir, top_dir)
    opened: dict[str, Any] = {}

    def open_checked(folder: Path, dtype: str, bench: Any) -> None:
        """Called by the workload once the benchmark slice and the checkpoint are known, before the model loads."""
        identity = identity_from_config(config_dict(cfg), weights=weights_digest(weight_files(folder)), dtype=dtype,
                                        benchmark=bench.identity())
        storage = open_storage(str(s.storage), int(s.heartbeat_interval), int(s.grace_period), int(s.max_retry))
        sampler = make_sampler(s, int(cfg.worker)) if mode == "search" else None
        study = open_study(s, storage, sampler)
        check_identity(study, identity)
        write_json(top_dir / "study.json", {"storage": resolve_storage_url(str(s.storage)),
                                            "study_name": study.study_name,
                                            "artifact_dir": str(Path(str(s.artifact_dir)).resolve())})
        opened.update(study=study, identity=identity)

    work = Workload.from_config(cfg, before_load=open_checked)
    _sigterm_to_interrupt()
    if mode == "search":
        run_search(cfg, opened["study"], work, job_dir, opened["identity"])
        return None
    if s.baselines:   # the paper's baselines of this identity, unless the study holds them (recdiff.study.baselines)
        from recdiff.study.baselines import run_baselines

        run_baselines(cfg, opened["study"], work, top_dir / "baselines", opened["identity"])
    return run_grid_trial(cfg, opened["study"], work, job_dir, opened["identity"])
