"""The one path of a trial through its study: claim → measure (:mod:`recdiff.trial`) → record. Grid jobs
(:mod:`~recdiff.study.grid`), the baselines (:mod:`~recdiff.study.baselines`) and searches
(:mod:`~recdiff.study.search`) all take it.

- **Claim.** A configuration is claimed before it is measured: a RUNNING trial carrying its ``config_hash``, its
  ``identity``, its claimant (machine and process, :mod:`~recdiff.study.claimant`) and the claim's token, with
  heartbeats while it is worked on, so that no other worker runs it too. A grid job takes its configuration
  (:func:`take`), waiting while another live process holds it and taking it over once that process is found dead.
  Two claims made at the same moment are settled by trial number: the lower one runs, the other is PRUNED with
  ``duplicate_of``. A search claims the trial ``study.ask`` made (:func:`claim_asked`).
- **Measure** (:func:`measure`), while the claim is held: copied from another study of the storage that measured the
  configuration under the same identity (``study.reuse``), else measured (:func:`recdiff.trial.evaluate`), with its
  provenance.
- **Record** (:func:`record_outcome`): the outcome's artifacts, user attributes and state, told to the study
  (:func:`tell`, the one place where a claimed trial's outcome reaches the study), a log line and ``result.json``,
  fenced by the claim's token (:func:`~recdiff.study.storage.finish_claim`): a worker that was away (stopped, cut
  off) while its claim was taken over records nothing; one log line says its result is dropped. Artifacts are part
  of the record: a trial whose artifacts cannot be stored is FAIL (the reason names the path, and a full disk as "no
  space left on device"), never COMPLETE.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import optuna
from optuna.distributions import BaseDistribution
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from recdiff.errors import no_space
from recdiff.study import claimant
from recdiff.study import storage as _storage
from recdiff.study.identity import differences, trial_identity
from recdiff.study.results import write_result
from recdiff.study.storage import (
    CLAIM_ATTR,
    CLAIMANT_ATTR,
    HEARTBEAT_ATTR,
    claim_token,
    fail_stale_trials,
    finish_claim,
    holding,
    new_token,
    record_heartbeat,
    storage_of,
    study_id,
    trial_id,
)
from recdiff.trial.outcome import Outcome, State, evaluate
from recdiff.trial.provenance import provenance
from recdiff.trial.record import TrialRecord, read_attrs

if TYPE_CHECKING:
    from recdiff.schema import Config

log = logging.getLogger("recdiff.study")
Load = Callable[[], Any]   # the job's workload, loaded on first use
POLL_S = 2.0               # how often a job waiting for another process's claim looks again
sleep = time.sleep         # tests replace it (with a fake clock)


# ------------------------------------------------------------------------------- the trials of a configuration
def holder(study: optuna.Study, digest: str) -> FrozenTrial | None:
    """The trial that holds a configuration: a COMPLETE one, else the lowest-numbered RUNNING one."""
    same = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
            if t.user_attrs.get("config_hash") == digest]
    done = [t for t in same if t.state == TrialState.COMPLETE]
    return done[0] if done else min(same, key=lambda t: t.number, default=None)


def find_duplicate(study: optuna.Study, digest: str, exclude: int | None = None) -> FrozenTrial | None:
    """A COMPLETE trial, or one RUNNING elsewhere, with the same configuration."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING)):
        if t.user_attrs.get("config_hash") == digest and t.number != exclude:
            return t
    return None


def worker_deaths(study: optuna.Study, digest: str) -> int:
    """How often a configuration's worker died while it ran (``fail_kind=worker_died``)."""
    return sum(t.user_attrs.get("config_hash") == digest and t.user_attrs.get("fail_kind") == "worker_died"
               for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)))


def duplicate(number: int) -> Outcome:
    """The outcome of a trial that stepped back for trial ``number`` of the same configuration."""
    return Outcome(State.PRUNED, None, {"duplicate_of": number, "prune_reason": f"duplicate of trial {number}"}, [])


# ------------------------------------------------------------------------------------------------- claims
def _sign(study: optuna.Study, tid: int, attrs: Mapping[str, Any]) -> FrozenTrial | None:
    """Write this process's claim on a trial it has just made RUNNING: token, claimant, a first heartbeat, ``attrs``.
    None when the trial ended meanwhile (this process was away for longer than the grace period)."""
    storage = storage_of(study)
    try:
        storage.set_trial_system_attr(tid, CLAIM_ATTR, new_token())
        storage.set_trial_system_attr(tid, CLAIMANT_ATTR, claimant.this_process())
        for k, v in attrs.items():
            storage.set_trial_user_attr(tid, k, v)
        trial = storage.get_trial(tid)
        record_heartbeat(study, trial)
    except optuna.exceptions.UpdateFinishedTrialError:
        return None
    return trial


def _take_waiting(study: optuna.Study, t: FrozenTrial, attrs: Mapping[str, Any]) -> FrozenTrial | None:
    """Claim a WAITING trial (a re-queued retry); None when another worker took it first."""
    try:
        if not storage_of(study).set_trial_state_values(trial_id(t), TrialState.RUNNING):
            return None
    except optuna.exceptions.UpdateFinishedTrialError:
        return None
    return _sign(study, trial_id(t), attrs)


def claim_trial(study: optuna.Study, params: dict[str, tuple[Any, BaseDistribution]],
                attrs: dict[str, Any]) -> FrozenTrial:
    """A RUNNING trial for this configuration, with its claim's token and a first heartbeat: its re-queued retry when
    there is one (the retry keeps the link to the failed attempt), else a new trial."""
    storage = storage_of(study)
    for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        if t.user_attrs.get("config_hash") == attrs["config_hash"] and \
                (taken := _take_waiting(study, t, attrs)) is not None:
            return taken
    template = optuna.trial.create_trial(
        state=TrialState.RUNNING, params={k: v for k, (v, _) in params.items()},
        distributions={k: d for k, (_, d) in params.items()}, user_attrs=attrs,
        system_attrs={HEARTBEAT_ATTR: _storage.clock(), CLAIMANT_ATTR: claimant.this_process(),
                      CLAIM_ATTR: new_token()})
    template.datetime_start = datetime.datetime.now()
    trial = storage.get_trial(storage.create_new_trial(study_id(study), template_trial=template))
    record_heartbeat(study, trial)   # a database keeps heartbeats apart from the trial
    return trial


def claim(plan: Config, study: optuna.Study, attrs: dict[str, Any]) -> FrozenTrial | None:
    """A claim on the plan's configuration; None when another process claimed it at the same moment with a lower
    trial number (it runs; this claim is PRUNED as its duplicate)."""
    trial = claim_trial(study, plan.grid_params(), attrs)
    found = holder(study, attrs["config_hash"])
    if found is None or found.number == trial.number:
        return trial
    tell(study, trial, duplicate(found.number), "")
    return None


def take(plan: Config, study: optuna.Study, attrs: dict[str, Any]) -> FrozenTrial | None:
    """A grid job's configuration: its COMPLETE trial, or this process's claim on it (RUNNING), waiting while another
    live process holds it, until it is COMPLETE or its claimant is found dead (at once when it ran on this machine,
    else once its heartbeat is older than the grace period). None when its worker died more than
    ``study.max_retry`` times."""
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


def claim_asked(study: optuna.Study, trial: optuna.trial.Trial) -> FrozenTrial | None:
    """Claim a trial that ``study.ask`` made (RUNNING already): this process is its claimant, with a claim token; None
    when the trial ended meanwhile (this process was away for longer than the grace period)."""
    return _sign(study, trial_id(trial), {})


# ------------------------------------------------------------------------------------------------ measure
def reusable(study: optuna.Study, digest: str, identity: Mapping[str, Any]) -> tuple[str, FrozenTrial] | None:
    """(study name, trial): a COMPLETE trial of the same configuration, measured under the same identity, in another
    study of the same storage. The paper's recipes share their common configurations (the baselines, the sampler's
    defaults) this way instead of computing them once per recipe. Identities match as within a study: a part unknown
    on one side (a device's name, before identities held it) is no difference."""
    storage = storage_of(study)
    for other in storage.get_all_studies():
        if other.study_name == study.study_name:
            continue
        other_id = storage.get_study_id_from_name(other.study_name)
        for t in storage.get_all_trials(other_id, deepcopy=False, states=(TrialState.COMPLETE,)):
            if t.user_attrs.get("config_hash") != digest or "reused_from" in t.user_attrs:
                continue
            theirs = trial_identity(t.user_attrs)
            if theirs is not None and not differences(theirs, identity):
                return other.study_name, t
    return None


def reused_outcome(source_study: str, source: FrozenTrial) -> Outcome:
    """The outcome of ``source`` recorded again: same values and measurements (under today's names,
    :func:`recdiff.trial.record.read_attrs`), a link to where they were measured."""
    attrs = {k: v for k, v in read_attrs(source.user_attrs).items() if k not in ("sweep_token", "baseline")}
    attrs["reused_from"] = {"study": source_study, "trial": source.number}
    return Outcome(State.COMPLETE, list(source.values), attrs, [])


def measure(plan: Config, study: optuna.Study, load: Load, out_dir: Path, attrs: dict[str, Any],
            reuse: bool) -> Outcome:
    """The plan's configuration copied, with ``reuse``, from another study of the storage that measured it under the
    same identity, else measured on ``load()`` with its provenance and full config."""
    source = reusable(study, attrs["config_hash"], attrs["identity"]) if reuse else None
    if source is not None:
        log.info("reused trial %d of study %s (same configuration and identity)", source[1].number, source[0])
        return reused_outcome(*source)
    work = load()
    outcome = evaluate(work, plan.trial, out_dir)
    outcome.attrs.update(config=plan.as_dict(), **provenance(work.device, out_dir, work.threads))
    return outcome


# ------------------------------------------------------------------------------------------------- record
def upload_artifacts(storage: BaseStorage, tid: int, paths: list[str], artifact_dir: str) -> None:
    from optuna.artifacts import FileSystemArtifactStore, upload_artifact

    if not paths:
        return
    Path(artifact_dir).mkdir(parents=True, exist_ok=True)
    store = FileSystemArtifactStore(base_path=artifact_dir)
    frozen = storage.get_trial(tid)
    for p in paths:
        if Path(p).is_file():
            upload_artifact(artifact_store=store, file_path=p, study_or_trial=frozen, storage=storage)


def store_artifacts(study: optuna.Study, trial: FrozenTrial, outcome: Outcome,
                    artifact_dir: str) -> None:
    """Upload the outcome's artifacts; when that fails, the outcome becomes FAIL (never a COMPLETE trial pointing at
    artifacts that were not written)."""
    try:
        upload_artifacts(storage_of(study), trial_id(trial), outcome.artifacts, artifact_dir)
    except OSError as e:
        outcome.state, outcome.values = State.FAIL, None
        outcome.attrs.update(fail_kind="artifacts",
                             fail_reason=f"cannot store artifacts in {Path(artifact_dir).resolve()}: {no_space(e)}")


def _held(trial: FrozenTrial, token: str | None) -> bool:
    return trial.state == TrialState.RUNNING and claim_token(trial) == token


def _dropped(study: optuna.Study, trial: FrozenTrial, outcome: Outcome) -> None:
    now = storage_of(study).get_trial(trial_id(trial))
    why = now.user_attrs.get("fail_reason") if now.state == TrialState.FAIL else None
    log.warning("trial %d: this worker's claim was taken over while it was away (stopped, or cut off from the storage, "
                "for longer than study.grace_period): the trial is %s%s; this worker's %s result is dropped",
                trial.number, now.state.name, f" ({why})" if why else "", outcome.state.name)


def tell(study: optuna.Study, trial: FrozenTrial, outcome: Outcome, artifact_dir: str) -> FrozenTrial | None:
    """The one place where a claimed trial's outcome reaches the study: its artifacts, then the study's sampler sees
    it (as in ``study.tell``), then its user attributes and state, written in one step only while this worker still
    holds the claim (:func:`~recdiff.study.storage.finish_claim`). The finished trial; None when the claim was taken
    over (another worker found it stale and failed it): nothing of this outcome is recorded, one log line says so."""
    storage, tid, token = storage_of(study), trial_id(trial), claim_token(trial)
    try:
        if not _held(storage.get_trial(tid), token):
            _dropped(study, trial, outcome)
            return None
        store_artifacts(study, trial, outcome, artifact_dir)
        state = TrialState[outcome.state.name]
        values = list(outcome.values) if outcome.state == State.COMPLETE else None
        try:
            study.sampler.after_trial(study, storage.get_trial(tid), state, values)
        except RuntimeError:
            # GridSampler stops the study once its grid is exhausted, which Optuna allows only inside study.optimize
            if not isinstance(study.sampler, optuna.samplers.GridSampler):
                raise
        recorded = finish_claim(storage, tid, token, state, values, outcome.attrs)
    except optuna.exceptions.UpdateFinishedTrialError:   # ended between the look and the artifacts
        recorded = False
    if not recorded:
        _dropped(study, trial, outcome)
        return None
    return storage.get_trial(tid)


def retire_waiting(study: optuna.Study, done: FrozenTrial) -> None:
    """Prune re-queued copies of a configuration that ``done`` completed (a retry made while another worker claimed
    the configuration afresh), so that no WAITING trial is left for a configuration the study holds."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        if t.user_attrs.get("config_hash") == done.user_attrs.get("config_hash") and \
                (taken := _take_waiting(study, t, {})) is not None:
            tell(study, taken, duplicate(done.number), "")


def log_trial(number: int, outcome: Outcome, params: dict[str, Any]) -> None:
    shown = " ".join(f"{k}={v}" for k, v in params.items() if k not in ("sampler", "benchmark"))
    if outcome.state == State.COMPLETE:
        a, tps = outcome.values
        rec = TrialRecord.of(outcome.attrs)   # a trial copied from an older journal holds older names
        lo, hi = rec.accuracy_lo, rec.accuracy_hi
        log.info("trial %d COMPLETE accuracy=%.3f [%.3f, %.3f] tokens_per_s=%.1f | %s", number, a, lo, hi, tps, shown)
    else:
        why = outcome.attrs.get("fail_reason") or outcome.attrs.get("prune_reason")
        log.warning("trial %d %s (%s) | %s", number, outcome.state.name, why, shown)


def record_outcome(plan: Config, study: optuna.Study, trial: FrozenTrial, outcome: Outcome, out_dir: Path,
                   attrs: dict[str, Any]) -> FrozenTrial | None:
    """Record a claimed trial's outcome, with ``attrs`` (what every trial of the job carries: ``config_hash``,
    ``identity``, ...): told to the study (:func:`tell`), its re-queued copies retired once it is COMPLETE, one log
    line, ``result.json`` in ``out_dir``. None, and nothing written, when the claim was taken over meanwhile."""
    outcome.attrs.update(attrs)
    done = tell(study, trial, outcome, plan.study.artifact_dir)
    if done is None:
        return None
    if done.state == TrialState.COMPLETE:
        retire_waiting(study, done)
    log_trial(done.number, outcome, done.params)
    write_result(out_dir, done, outcome, done.params, {"baseline": True} if attrs.get("baseline") else None)
    return done


def run_claimed(plan: Config, study: optuna.Study, trial: FrozenTrial, load: Load, out_dir: Path,
                attrs: dict[str, Any], reuse: bool) -> tuple[FrozenTrial | None, Outcome]:
    """Measure a claimed trial while holding its claim (:func:`~recdiff.study.storage.holding`: heartbeats; an
    interruption fails it and re-queues it), then record it (None: the claim was taken over meanwhile)."""
    with holding(study, trial, plan.study.heartbeat_interval):
        outcome = measure(plan, study, load, out_dir, attrs, reuse)
    return record_outcome(plan, study, trial, outcome, out_dir, attrs), outcome


def grid_trial(plan: Config, study: optuna.Study, load: Load, out_dir: Path,
               attrs: dict[str, Any]) -> FrozenTrial | None:
    """The plan's configuration in a grid study, as a caller outside a sweep's job needs it (the tune's reference and
    held-out measurements): COMPLETE already, or taken (:func:`take`: waiting while another live process holds it),
    then copied (``study.reuse``) or measured, and recorded (:func:`run_claimed`); taken again when this worker's
    claim was taken over meanwhile. None when its workers died more than ``study.max_retry`` times."""
    while True:
        trial = take(plan, study, attrs)
        if trial is None or trial.state == TrialState.COMPLETE:
            return trial
        done, _ = run_claimed(plan, study, trial, load, out_dir, attrs, reuse=plan.study.reuse)
        if done is not None:
            return done


def skip_duplicate(study: optuna.Study, trial: FrozenTrial, digest: str) -> FrozenTrial | None:
    """When another trial of the study holds the configuration ``digest`` (:func:`find_duplicate`), the claimed
    ``trial`` is told PRUNED as its duplicate (``duplicate_of``) and that other trial returned; else None, and
    ``trial`` is left to be measured."""
    dup = find_duplicate(study, digest, exclude=trial.number)
    if dup is not None:
        tell(study, trial, duplicate(dup.number), "")
    return dup
