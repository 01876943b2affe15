"""Recording trials: how a trial ended (:class:`Outcome`), its provenance, claims, artifacts and ``result.json``.

A grid trial is claimed before it is evaluated: a RUNNING trial carrying the configuration's ``config_hash``, its
``identity``, its claimant (machine and process) and a heartbeat, so that a second sweep on the study does not run the
configuration too. Two claims made at the same moment are settled by trial number (the lower one runs; the other is
PRUNED with ``duplicate_of``). Artifacts are part of the record: a trial whose artifacts cannot be stored is FAIL (the
reason names the path, and a full disk as "no space left on device"), not COMPLETE.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import platform
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from recdiff.errors import NO_SPACE, RecdiffError, no_space
from recdiff.study import claimant, storage as _storage
from recdiff.study.identity import config_hash
from recdiff.study.storage import CLAIMANT_ATTR, HEARTBEAT_ATTR, storage_of, study_id, trial_id

if TYPE_CHECKING:
    from recdiff.schema import Config, TrialSpec

log = logging.getLogger("recdiff.study")

# Set by the sweep's Hydra callback (recdiff.study.sweep_status): which result.json files this sweep wrote.
SWEEP_TOKEN_ENV = "RECDIFF_SWEEP_TOKEN"


def git_commit() -> str | None:
    repo = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def library_versions() -> dict[str, str]:
    import importlib.metadata as md

    v = {"python": platform.python_version()}
    for pkg in ("recdiff", "torch", "optuna", "numpy", "transformers", "hydra-core", "polars"):
        try:
            v[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    import torch

    if torch.version.cuda:
        v["cuda"] = torch.version.cuda
    return v


def device_name(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


@dataclass
class Outcome:
    state: TrialState
    values: list[float] | None
    attrs: dict[str, Any]
    artifacts: list[str]


def evaluate(work: Any, trial: TrialSpec, output_dir: Path) -> Outcome:
    """Run one trial and classify how it ended; never raises for a trial's own failure."""
    import torch

    from recdiff.trial import TrialTimeout, run_trial

    try:
        res = run_trial(work, trial, output_dir)
    except RecdiffError as e:
        return Outcome(TrialState.PRUNED, None, {"prune_reason": f"invalid combination: {e}"}, [])
    except TrialTimeout as e:
        return Outcome(TrialState.FAIL, None, {"fail_reason": str(e), "fail_kind": "timeout"}, [])
    except OSError as e:
        if e.errno not in NO_SPACE:
            return _error(e)
        where = e.filename or output_dir
        return Outcome(TrialState.FAIL, None, {"fail_reason": f"cannot write the trial's files in {where}: "
                                               f"{no_space(e)}", "fail_kind": "artifacts"}, [])
    except (torch.OutOfMemoryError, MemoryError) as e:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return Outcome(TrialState.FAIL, None, {"fail_reason": f"out of memory: {first}", "fail_kind": "oom"}, [])
    except Exception as e:  # noqa: BLE001 — any other error of the trial is recorded, the sweep goes on
        return _error(e)
    artifacts = [p for p in (res.stability_png, str(Path(res.attrs["output_dir"]) / "samples.csv")) if p]
    return Outcome(TrialState.COMPLETE, [res.accuracy, res.tokens_per_s], res.attrs, artifacts)


def _error(e: Exception) -> Outcome:
    log.exception("trial raised")
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return Outcome(TrialState.FAIL, None, {"fail_reason": f"{type(e).__name__}: {first}".rstrip(": "),
                                           "fail_kind": "error"}, [])


def provenance(plan: Config, device: str, output_dir: Path, threads: int | None = None) -> dict[str, Any]:
    """Where and how a trial was measured; ``threads``: the job's torch thread budget (``thread_budget``)."""
    return {"config": plan.as_dict(), "config_hash": config_hash(plan), "git_commit": git_commit(),
            "device": device_name(device), "versions": library_versions(), "output_dir": str(output_dir),
            **({"thread_budget": threads} if threads is not None else {})}


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


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomic: several jobs may write the same file. A file that cannot be written (a full disk) stops the sweep in
    one line; what the study recorded stays."""
    from recdiff.errors import SweepStopped

    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise SweepStopped(f"cannot write {path} ({no_space(e)}): the sweep stopped; what the study recorded is "
                           "kept: run the same command again once there is room") from None


def write_result(output_dir: Path, trial: FrozenTrial | None, outcome: Outcome, params: dict[str, Any],
                 extra: dict[str, Any] | None = None) -> None:
    state = "COMPLETE" if outcome.state == TrialState.COMPLETE else outcome.state.name
    values = dict(zip(("accuracy", "tokens_per_s"), outcome.values)) if outcome.values else None
    write_json(output_dir / "result.json", {
        "params": params, "values": values, "user_attrs": outcome.attrs, "state": state,
        "trial_number": trial.number if trial is not None else None, "sweep_token": os.environ.get(SWEEP_TOKEN_ENV),
        **(extra or {})})


def log_trial(number: int, outcome: Outcome, params: dict[str, Any]) -> None:
    shown = " ".join(f"{k}={v}" for k, v in params.items() if k not in ("sampler", "benchmark"))
    if outcome.state == TrialState.COMPLETE:
        a, tps = outcome.values
        lo, hi = outcome.attrs["accuracy_low"], outcome.attrs["accuracy_high"]
        log.info("trial %d COMPLETE accuracy=%.3f [%.3f, %.3f] tokens_per_s=%.1f | %s", number, a, lo, hi, tps, shown)
    else:
        why = outcome.attrs.get("fail_reason") or outcome.attrs.get("prune_reason")
        log.warning("trial %d %s (%s) | %s", number, outcome.state.name, why, shown)


def find_duplicate(study: optuna.Study, digest: str, exclude: int | None = None) -> FrozenTrial | None:
    """A COMPLETE trial, or one RUNNING elsewhere, with the same configuration."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING)):
        if t.user_attrs.get("config_hash") == digest and t.number != exclude:
            return t
    return None


def holder(study: optuna.Study, digest: str) -> FrozenTrial | None:
    """The trial that holds a configuration: a COMPLETE one, else the lowest-numbered RUNNING one."""
    same = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
            if t.user_attrs.get("config_hash") == digest]
    done = [t for t in same if t.state == TrialState.COMPLETE]
    return done[0] if done else min(same, key=lambda t: t.number, default=None)


def reusable(study: optuna.Study, digest: str, identity: Mapping[str, Any]) -> tuple[str, FrozenTrial] | None:
    """(study name, trial): a COMPLETE trial of the same configuration, measured under the same identity, in another
    study of the same storage. The paper's recipes share their common configurations (the baselines, the sampler's
    defaults) this way instead of computing them once per recipe."""
    from recdiff.study.identity import key, trial_identity

    storage = storage_of(study)
    ours = key(identity)
    for other in storage.get_all_studies():
        if other.study_name == study.study_name:
            continue
        other_id = storage.get_study_id_from_name(other.study_name)
        for t in storage.get_all_trials(other_id, deepcopy=False, states=(TrialState.COMPLETE,)):
            if t.user_attrs.get("config_hash") != digest or "reused_from" in t.user_attrs:
                continue
            theirs = trial_identity(t.user_attrs)
            if theirs is not None and key(theirs) == ours:
                return other.study_name, t
    return None


def reused_outcome(source_study: str, source: FrozenTrial) -> Outcome:
    """The outcome of ``source`` recorded again: same values and measurements, a link to where they were measured."""
    attrs = {k: v for k, v in source.user_attrs.items() if k not in ("sweep_token", "baseline")}
    attrs["reused_from"] = {"study": source_study, "trial": source.number}
    return Outcome(TrialState.COMPLETE, list(source.values), attrs, [])


def claim_trial(study: optuna.Study, params: dict[str, tuple[Any, BaseDistribution]],
                attrs: dict[str, Any]) -> FrozenTrial:
    """A RUNNING trial for this configuration, with a first heartbeat: its re-queued retry when there is one (the
    retry keeps the link to the failed attempt), else a new trial."""
    storage, me = storage_of(study), claimant.this_process()
    for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        if t.user_attrs.get("config_hash") == attrs["config_hash"] and \
                storage.set_trial_state_values(trial_id(t), TrialState.RUNNING):   # False: another worker took it
            storage.set_trial_system_attr(trial_id(t), CLAIMANT_ATTR, me)
            storage.set_trial_system_attr(trial_id(t), HEARTBEAT_ATTR, _storage.clock())
            for k, v in attrs.items():
                storage.set_trial_user_attr(trial_id(t), k, v)
            return storage.get_trial(trial_id(t))
    template = optuna.trial.create_trial(
        state=TrialState.RUNNING, params={k: v for k, (v, _) in params.items()},
        distributions={k: d for k, (_, d) in params.items()}, user_attrs=attrs,
        system_attrs={HEARTBEAT_ATTR: _storage.clock(), CLAIMANT_ATTR: me})
    template.datetime_start = datetime.datetime.now()
    return storage.get_trial(storage.create_new_trial(study_id(study), template_trial=template))


def store_artifacts(study: optuna.Study, trial: optuna.trial.Trial | FrozenTrial, outcome: Outcome,
                    artifact_dir: str) -> None:
    """Upload the outcome's artifacts; when that fails, the outcome becomes FAIL (never a COMPLETE trial pointing at
    artifacts that were not written)."""
    try:
        upload_artifacts(storage_of(study), trial_id(trial), outcome.artifacts, artifact_dir)
    except OSError as e:
        outcome.state, outcome.values = TrialState.FAIL, None
        outcome.attrs.update(fail_kind="artifacts",
                             fail_reason=f"cannot store artifacts in {Path(artifact_dir).resolve()}: {no_space(e)}")


def finish_trial(study: optuna.Study, trial: FrozenTrial, outcome: Outcome, artifact_dir: str) -> FrozenTrial:
    """Artifacts, user attributes, then the final state of a claimed trial."""
    storage, tid = storage_of(study), trial_id(trial)
    store_artifacts(study, trial, outcome, artifact_dir)
    for k, v in outcome.attrs.items():
        storage.set_trial_user_attr(tid, k, v)
    storage.set_trial_state_values(tid, outcome.state, values=outcome.values)
    return storage.get_trial(tid)


def worker_deaths(study: optuna.Study, digest: str) -> int:
    """How often a configuration's worker died while it ran (``fail_kind=worker_died``)."""
    return sum(t.user_attrs.get("config_hash") == digest and t.user_attrs.get("fail_kind") == "worker_died"
               for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)))


def retire_waiting(study: optuna.Study, done: FrozenTrial) -> None:
    """Prune re-queued copies of a configuration that ``done`` completed (a retry made while another worker claimed
    the configuration afresh), so that no WAITING trial is left for a configuration the study holds."""
    storage = storage_of(study)
    for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        if t.user_attrs.get("config_hash") == done.user_attrs.get("config_hash") and \
                storage.set_trial_state_values(trial_id(t), TrialState.RUNNING):
            finish_trial(study, t, Outcome(TrialState.PRUNED, None, {
                "duplicate_of": done.number, "prune_reason": f"duplicate of trial {done.number}"}, []), "")
