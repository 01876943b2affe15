"""Optuna side of the sweeps: storage, search space, recording trials, the ask/tell loop, failures.

Layout of a study (docs/architecture.md, "Studies"): objectives ``accuracy`` and ``tokens_per_s`` (both
maximised, named with ``set_metric_names``); parameters named as the config keys with distributions from
``study.space``; user attributes with the measurements, the full resolved config, git commit, device,
library versions and the output directory. Each trial's stability picture and per-sample table are
uploaded as artifacts (``study.artifact_dir``) that ``optuna-dashboard --artifact-dir`` shows.

Two modes (``study.mode``):

- ``grid``: every Hydra job runs one trial and records it (a finished trial, created from a template as
  ``Study.add_trial`` does, with the artifacts attached before it is marked finished). A configuration
  already COMPLETE in the study is not run again, so re-running an interrupted multirun completes it.
- ``search``: every job runs an ask/tell loop until the study holds ``study.n_trials`` counted trials
  (COMPLETE, FAIL with a reason of its own, PRUNED as invalid); several jobs may share one study.

Failures: a trial that raises, times out or runs out of memory is FAIL with ``fail_reason``; an invalid
combination is PRUNED with ``prune_reason``; a duplicate proposal is PRUNED with ``duplicate_of``. A RUNNING
trial sends heartbeats; a trial whose heartbeat is older than ``study.grace_period`` (its worker died) is
failed by the next worker that looks and re-queued (``RetryHeartbeatStaleTrialCallback``).
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
import logging
import os
import platform
import signal
import subprocess
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import (BaseDistribution, CategoricalDistribution, FloatDistribution,
                                  IntDistribution)
from optuna.storages import BaseStorage, JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState
from omegaconf import DictConfig, OmegaConf

from recdiff.errors import RecdiffError

log = logging.getLogger("recdiff.study")
# Heartbeats, retry callbacks, metric names and artifacts are "experimental" in Optuna; we rely on them knowingly.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")

HEARTBEAT_ATTR = "recdiff:heartbeat"
# Trials failed because their worker went away: not counted towards n_trials, re-queued instead.
RETRIED_KINDS = ("worker_died", "interrupted")
# Keys of the config that do not change what a trial measures (left out of the duplicate hash).
VOLATILE_KEYS = ("study", "worker", "run.progress")


# ----------------------------------------------------------------------------------------------- storage


class HeartbeatJournalStorage(JournalStorage, BaseHeartbeat):
    """Optuna's journal storage plus heartbeats (Optuna has them for RDB storages only).

    The heartbeat is a trial system attribute holding a UNIX time; a RUNNING trial whose last heartbeat
    (or start, before the first one) is older than ``grace_period`` seconds is stale.
    """

    def __init__(self, backend: Any, heartbeat_interval: int, grace_period: int,
                 stale_callback: Any = None) -> None:
        super().__init__(backend)
        self._heartbeat_interval = heartbeat_interval
        self._grace_period = grace_period
        self._stale_callback = stale_callback

    def record_heartbeat(self, trial_id: int) -> None:
        self.set_trial_system_attr(trial_id, HEARTBEAT_ATTR, time.time())

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        now = time.time()
        stale = []
        for t in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
            last = t.system_attrs.get(HEARTBEAT_ATTR)
            if last is None and t.datetime_start is not None:
                last = t.datetime_start.timestamp()
            if last is not None and now - float(last) > self._grace_period:
                stale.append(t._trial_id)
        return stale

    def get_heartbeat_interval(self) -> int | None:
        return self._heartbeat_interval

    def get_heartbeat_stale_trial_callback(self) -> Any:
        return self._stale_callback


def resolve_storage_url(url: str) -> str:
    """A journal file path is made absolute (workers may run elsewhere); URLs pass through."""
    if "://" in url:
        return url
    return str(Path(os.path.expanduser(url)).resolve())


def open_storage(url: str, heartbeat_interval: int = 10, grace_period: int = 60, max_retry: int = 2) -> BaseStorage:
    """A path = journal file; ``sqlite:///``, ``postgresql://``, ``mysql://`` = RDB storage."""
    retry = RetryHeartbeatStaleTrialCallback(max_retry=max_retry)
    url = resolve_storage_url(url)
    scheme = url.split("://", 1)[0].split("+", 1)[0] if "://" in url else None
    if scheme is None:
        path = Path(url)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return HeartbeatJournalStorage(JournalFileBackend(str(path)), heartbeat_interval, grace_period, retry)
        except OSError as e:
            raise RecdiffError(f"cannot open journal storage {url}: {e}") from None
    if scheme not in ("sqlite", "postgresql", "postgres", "mysql"):
        raise RecdiffError(f"unknown storage {url!r}: use a journal file path, sqlite:///file.db or "
                           "postgresql://user@host:port/db")
    if scheme in ("postgresql", "postgres") and "+" not in url.split("://", 1)[0]:
        url = "postgresql+psycopg2://" + url.split("://", 1)[1]   # SQLAlchemy 2.1 would want psycopg 3
    if scheme == "sqlite":
        db = url.split(":///", 1)[-1]
        if db and db != ":memory:":
            Path(db).expanduser().parent.mkdir(parents=True, exist_ok=True)
    # Workers starting together on a fresh database race to create Optuna's schema; the losers see a
    # unique-violation from the DDL and succeed on a retry once the winner has committed.
    for attempt in range(5):
        try:
            return RDBStorage(url, heartbeat_interval=heartbeat_interval, grace_period=grace_period,
                              heartbeat_stale_trial_callback=retry,
                              engine_kwargs={"pool_pre_ping": True} if scheme != "sqlite" else None)
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            racing = any(s in first for s in ("UniqueViolation", "already exists", "duplicate key"))
            if not racing or attempt == 4:
                raise RecdiffError(f"cannot open storage {url}: {first}") from None
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def make_sampler(study_cfg: DictConfig, worker: int = 0) -> optuna.samplers.BaseSampler:
    algo = getattr(study_cfg.algorithm, "value", study_cfg.algorithm)
    seed = None if study_cfg.seed is None else int(study_cfg.seed) + worker   # workers must not propose alike
    if algo == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=int(study_cfg.population_size), seed=seed)
    if algo == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if algo == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    if algo == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if algo == "grid":
        space = {}
        for name in study_cfg.search:
            p = study_cfg.space[name]
            points = p.values if p.values is not None else p.choices
            if points is None:
                raise RecdiffError(f"study.algorithm=grid needs study.space.{name}.values")
            space[name] = list(points)
        return optuna.samplers.GridSampler(space, seed=seed)
    raise RecdiffError(f"unknown study.algorithm {algo!r}")


def open_study(study_cfg: DictConfig, storage: BaseStorage,
               sampler: optuna.samplers.BaseSampler | None = None) -> optuna.Study:
    directions = [str(d) for d in study_cfg.directions]
    names = [str(n) for n in study_cfg.metric_names]
    if len(names) != len(directions) or any(d not in ("maximize", "minimize") for d in directions):
        raise RecdiffError(f"study.directions={directions} must be maximize/minimize, one per study.metric_names")
    study = optuna.create_study(study_name=str(study_cfg.name), storage=storage, directions=directions,
                                sampler=sampler, load_if_exists=True)
    have = [d.name.lower() for d in study.directions]
    if have != directions:
        raise RecdiffError(f"study {study.study_name!r} exists with directions {have}, not {directions}")
    if study.metric_names != names:
        study.set_metric_names(names)
    return study


# ------------------------------------------------------------------------------------------ search space


def distribution(p: DictConfig | dict) -> BaseDistribution:
    kind = getattr(p["type"], "value", p["type"])
    if kind == "categorical":
        if not p.get("choices"):
            raise RecdiffError("a categorical study.space entry needs choices")
        return CategoricalDistribution(list(p["choices"]))
    if p.get("low") is None or p.get("high") is None:
        raise RecdiffError(f"a {kind} study.space entry needs low and high")
    if kind == "int":
        return IntDistribution(int(p["low"]), int(p["high"]), log=bool(p.get("log")),
                               step=int(p["step"]) if p.get("step") else 1)
    return FloatDistribution(float(p["low"]), float(p["high"]), log=bool(p.get("log")),
                             step=float(p["step"]) if p.get("step") else None)


def recorded_param(name: str, value: Any, space: DictConfig) -> tuple[Any, BaseDistribution]:
    """(value, distribution) for a value that was set rather than sampled: numeric ranges widen to hold it
    (Optuna lets numeric ranges differ between trials; categorical choices must not)."""
    if name not in space:
        raise RecdiffError(f"study.space has no entry for parameter {name!r}")
    dist = distribution(space[name])
    if isinstance(dist, CategoricalDistribution):
        if value not in dist.choices:
            raise RecdiffError(f"{name}={value!r} is not among study.space.{name}.choices {list(dist.choices)}")
        return value, dist
    if isinstance(dist, IntDistribution):
        if isinstance(value, bool) or not float(value).is_integer():
            raise RecdiffError(f"{name}={value!r} must be an integer (study.space.{name}.type=int)")
        value = int(value)
        low, high = min(dist.low, value), max(dist.high, value)
        if dist.log and low < 1:
            return value, IntDistribution(low, high, log=False, step=1)
        if dist.step != 1 and (value - dist.low) % dist.step:
            return value, IntDistribution(low, high, log=dist.log, step=1)
        return value, IntDistribution(low, high, log=dist.log, step=dist.step)
    value = float(value)
    low, high = min(dist.low, value), max(dist.high, value)
    if dist.log and low <= 0:
        return value, FloatDistribution(low, high)
    return value, FloatDistribution(low, high, log=dist.log)


def grid_params(cfg: DictConfig) -> dict[str, tuple[Any, BaseDistribution]]:
    """Every sampler key of this trial, plus the sampler and benchmark names."""
    from recdiff.trial import sampler_params

    values = {"sampler": str(cfg.sampler.name), "benchmark": str(cfg.benchmark.name), **sampler_params(cfg.sampler)}
    return {k: recorded_param(k, v, cfg.study.space) for k, v in values.items()}


# ------------------------------------------------------------------------------------------- provenance


def config_dict(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


def config_hash(cfg: DictConfig) -> str:
    """What makes two trials identical: the resolved config without study/bookkeeping keys."""
    d = config_dict(cfg)
    for key in VOLATILE_KEYS:
        node, *rest = key.split(".")
        if rest:
            d.get(node, {}).pop(rest[0], None)
        else:
            d.pop(node, None)
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


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


# ------------------------------------------------------------------------------------------------ trials


@dataclass
class Outcome:
    state: TrialState
    values: list[float] | None
    attrs: dict[str, Any]
    artifacts: list[str]


def evaluate(work: Any, cfg: DictConfig, output_dir: Path) -> Outcome:
    """Run one trial and classify how it ended; never raises for a trial's own failure."""
    import torch

    from recdiff.trial import TrialTimeout, run_trial

    try:
        res = run_trial(work, cfg, output_dir)
    except RecdiffError as e:
        return Outcome(TrialState.PRUNED, None, {"prune_reason": f"invalid combination: {e}"}, [])
    except TrialTimeout as e:
        return Outcome(TrialState.FAIL, None, {"fail_reason": str(e), "fail_kind": "timeout"}, [])
    except (torch.OutOfMemoryError, MemoryError) as e:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return Outcome(TrialState.FAIL, None, {"fail_reason": f"out of memory: {first}", "fail_kind": "oom"}, [])
    except Exception as e:  # noqa: BLE001 — any other error of the trial is recorded, the sweep goes on
        log.exception("trial raised")
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return Outcome(TrialState.FAIL, None, {"fail_reason": f"{type(e).__name__}: {first}".rstrip(": "),
                                               "fail_kind": "error"}, [])
    artifacts = [p for p in (res.stability_png, str(Path(res.attrs["output_dir"]) / "samples.csv")) if p]
    return Outcome(TrialState.COMPLETE, [res.accuracy, res.tokens_per_s], res.attrs, artifacts)


def provenance(cfg: DictConfig, device: str, output_dir: Path) -> dict[str, Any]:
    return {"config": config_dict(cfg), "config_hash": config_hash(cfg), "git_commit": git_commit(),
            "device": device_name(device), "versions": library_versions(), "output_dir": str(output_dir)}


def upload_artifacts(storage: BaseStorage, trial_id: int, paths: list[str], artifact_dir: str) -> None:
    from optuna.artifacts import FileSystemArtifactStore, upload_artifact

    if not paths:
        return
    Path(artifact_dir).mkdir(parents=True, exist_ok=True)
    store = FileSystemArtifactStore(base_path=artifact_dir)
    frozen = storage.get_trial(trial_id)
    for p in paths:
        if Path(p).is_file():
            upload_artifact(artifact_store=store, file_path=p, study_or_trial=frozen, storage=storage)


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomic: several jobs may write the same file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def write_result(output_dir: Path, trial: FrozenTrial | None, outcome: Outcome, params: dict[str, Any],
                 extra: dict[str, Any] | None = None) -> None:
    state = "COMPLETE" if outcome.state == TrialState.COMPLETE else outcome.state.name
    values = dict(zip(("accuracy", "tokens_per_s"), outcome.values)) if outcome.values else None
    write_json(output_dir / "result.json", {
        "params": params, "values": values, "user_attrs": outcome.attrs, "state": state,
        "trial_number": trial.number if trial is not None else None, **(extra or {})})


def _log_trial(number: int, outcome: Outcome, params: dict[str, Any]) -> None:
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


def fail_stale_trials(study: optuna.Study) -> list[int]:
    """Fail RUNNING trials whose worker stopped sending heartbeats; re-queue them (max_retry)."""
    storage = study._storage
    if not isinstance(storage, BaseHeartbeat) or storage.get_heartbeat_interval() is None:
        return []
    failed = []
    for trial_id in storage._get_stale_trial_ids(study._study_id):
        try:
            storage.set_trial_user_attr(trial_id, "fail_kind", "worker_died")
            storage.set_trial_user_attr(trial_id, "fail_reason", "worker died (no heartbeat within the grace period)")
            if storage.set_trial_state_values(trial_id, state=TrialState.FAIL):
                failed.append(trial_id)
        except (optuna.exceptions.UpdateFinishedTrialError, RuntimeError, KeyError):
            continue   # another worker got there first
    callback = storage.get_heartbeat_stale_trial_callback()
    for trial_id in failed:
        trial = copy.deepcopy(storage.get_trial(trial_id))
        log.warning("trial %d: worker died; failed and re-queued", trial.number)
        if callback is not None:
            callback(study, trial)
    return failed


class Heartbeat:
    """Records heartbeats for one RUNNING trial from a daemon thread."""

    def __init__(self, storage: BaseStorage, trial_id: int, interval: int) -> None:
        self.storage = storage
        self.trial_id, self.interval = trial_id, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recdiff-heartbeat", daemon=True)

    def _run(self) -> None:
        while True:
            try:
                if isinstance(self.storage, BaseHeartbeat):
                    self.storage.record_heartbeat(self.trial_id)
            except Exception:  # noqa: BLE001 — a finished or failed trial stops beating
                return
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# ---------------------------------------------------------------------------------------------- grid mode


def record_trial(study: optuna.Study, params: dict[str, tuple[Any, BaseDistribution]], outcome: Outcome,
                 artifact_dir: str) -> FrozenTrial:
    """Add a finished trial the way ``Study.add_trial`` does (``create_new_trial`` from a template), but
    attach the artifacts while it is still RUNNING: Optuna refuses changes to a finished trial."""
    storage = study._storage
    now = datetime.datetime.now()
    template = optuna.trial.create_trial(
        state=TrialState.RUNNING, params={k: v for k, (v, _) in params.items()},
        distributions={k: d for k, (_, d) in params.items()}, user_attrs=outcome.attrs,
        system_attrs={HEARTBEAT_ATTR: time.time()})
    template.datetime_start = now
    trial_id = storage.create_new_trial(study._study_id, template_trial=template)
    try:
        upload_artifacts(storage, trial_id, outcome.artifacts, artifact_dir)
    finally:
        storage.set_trial_state_values(trial_id, outcome.state, values=outcome.values)
    return storage.get_trial(trial_id)


def run_grid_trial(cfg: DictConfig, study: optuna.Study, work: Any, job_dir: Path) -> tuple[float, float] | None:
    fail_stale_trials(study)
    params = grid_params(cfg)
    plain = {k: v for k, (v, _) in params.items()}
    digest = config_hash(cfg)
    if cfg.study.skip_duplicates:
        dup = find_duplicate(study, digest)
        if dup is not None and dup.state == TrialState.COMPLETE:
            log.info("skipped: identical configuration is trial %d of study %s", dup.number, study.study_name)
            write_json(job_dir / "result.json", {"params": dup.params, "values": dict(zip(study.metric_names, dup.values)),
                                                 "user_attrs": dup.user_attrs, "state": "COMPLETE",
                                                 "trial_number": dup.number, "skipped_duplicate": True})
            return tuple(dup.values)
    outcome = evaluate(work, cfg, job_dir)
    outcome.attrs.update(provenance(cfg, work.device, job_dir))
    trial = record_trial(study, params, outcome, str(cfg.study.artifact_dir))
    _log_trial(trial.number, outcome, plain)
    write_result(job_dir, trial, outcome, plain)
    return tuple(outcome.values) if outcome.values else None


# -------------------------------------------------------------------------------------------- search mode


def count_trials(study: optuna.Study) -> tuple[int, int]:
    """(counted towards n_trials, RUNNING). Not counted: WAITING, duplicates, trials lost with a worker."""
    done = running = 0
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.RUNNING:
            running += 1
        elif t.state == TrialState.COMPLETE:
            done += 1
        elif t.state == TrialState.FAIL and t.user_attrs.get("fail_kind") not in RETRIED_KINDS + (None,):
            done += 1
        elif t.state == TrialState.PRUNED and "duplicate_of" not in t.user_attrs:
            done += 1
    return done, running


def search_space(cfg: DictConfig) -> dict[str, BaseDistribution]:
    space = {}
    sampler_keys = set(cfg.sampler.keys()) - {"name"}
    for name in cfg.study.search:
        if name not in sampler_keys:
            raise RecdiffError(f"study.search: {name!r} is not a setting of sampler {cfg.sampler.name!r} "
                               f"(it has {', '.join(sorted(sampler_keys))})")
        if name not in cfg.study.space:
            raise RecdiffError(f"study.search: {name!r} has no entry in study.space")
        space[name] = distribution(cfg.study.space[name])
    if not space:
        raise RecdiffError("study.mode=search needs study.search (the keys to search, e.g. [r_inner, beta])")
    return space


def run_search(cfg: DictConfig, study: optuna.Study, work: Any, job_dir: Path) -> None:
    space = search_space(cfg)
    n_trials = int(cfg.study.n_trials)
    interval = int(cfg.study.heartbeat_interval)
    retry = RetryHeartbeatStaleTrialCallback(max_retry=int(cfg.study.max_retry))
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
        trial_dir = job_dir / "trials" / f"{trial.number:04d}"
        tcfg = copy.deepcopy(cfg)
        for k, v in trial.params.items():
            tcfg.sampler[k] = v
        digest = config_hash(tcfg)
        trial.set_user_attr("config_hash", digest)
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
            for k, v in {"fail_kind": "interrupted", "fail_reason": "interrupted"}.items():
                trial.set_user_attr(k, v)
            study.tell(trial, state=TrialState.FAIL)
            retry(study, study._storage.get_trial(trial._trial_id))
            raise
        outcome.attrs.update(provenance(tcfg, work.device, trial_dir))
        for k, v in outcome.attrs.items():
            trial.set_user_attr(k, v)
        upload_artifacts(study._storage, trial._trial_id, outcome.artifacts, str(cfg.study.artifact_dir))
        try:
            study.tell(trial, outcome.values if outcome.state == TrialState.COMPLETE else None, state=outcome.state)
        except (optuna.exceptions.UpdateFinishedTrialError, RuntimeError) as e:
            log.warning("trial %d was failed by another worker meanwhile (%s)", trial.number, e)
        _log_trial(trial.number, outcome, params)
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
    """The Hydra task: open the study first (a bad storage fails before the model loads), then run."""
    from recdiff.trial import Workload

    optuna.logging.set_verbosity(optuna.logging.WARNING)   # one line per trial is ours
    job_dir, top_dir = _sweep_dir()
    s = cfg.study
    storage = open_storage(str(s.storage), int(s.heartbeat_interval), int(s.grace_period), int(s.max_retry))
    mode = getattr(s.mode, "value", s.mode)
    sampler = make_sampler(s, int(cfg.worker)) if mode == "search" else None
    study = open_study(s, storage, sampler)
    write_json(top_dir / "study.json", {"storage": resolve_storage_url(str(s.storage)), "study_name": study.study_name,
                                        "artifact_dir": str(Path(str(s.artifact_dir)).resolve())})
    if mode == "search":
        search_space(cfg)   # validate before loading the model
    else:
        grid_params(cfg)
    work = Workload.from_config(cfg)
    _sigterm_to_interrupt()
    if mode == "search":
        run_search(cfg, study, work, job_dir)
        return None
    return run_grid_trial(cfg, study, work, job_dir)


def load_study(storage_url: str, study_name: str) -> optuna.Study:
    """Open an existing study for reading (fails stale RUNNING trials first)."""
    storage = open_storage(storage_url)
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        raise RecdiffError(f"no study {study_name!r} in {storage_url}") from None
    fail_stale_trials(study)
    return study
