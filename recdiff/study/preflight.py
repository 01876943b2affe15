"""Everything a sweep can check without the model, checked before anything loads or is recorded.

A failure here is a configuration error: one :class:`RecdiffError` line, exit code 2, no trial recorded. What only
fails at run time (a prompt longer than the model's context, a sampled combination that is invalid) is the trial's
to record as PRUNED.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from recdiff.errors import RecdiffError
from recdiff.study.space import distribution
from recdiff.study.storage import journal_path, resolve_storage_url


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_run(run: DictConfig) -> None:
    """``run.*``: the generation settings with the same rules as ``recdiff.generate``, and the runner's own."""
    from recdiff.samplers.base import Selector

    if not _int(run.max_new_tokens) or run.max_new_tokens < 1:
        raise RecdiffError(f"run.max_new_tokens={run.max_new_tokens!r} must be an integer >= 1")
    try:
        Selector(run.temperature, run.top_p)
    except RecdiffError as e:
        raise RecdiffError(f"run.{e}") from None
    for name in ("warmup", "n_traces"):
        if run[name] < 0:
            raise RecdiffError(f"run.{name}={run[name]!r} must be >= 0")
    if run.timeout_s is not None and not (math.isfinite(run.timeout_s) and run.timeout_s > 0):
        raise RecdiffError(f"run.timeout_s={run.timeout_s!r} must be a number > 0 (or null: no limit)")
    if run.batch_size is not None and run.batch_size < 1:
        raise RecdiffError(f"run.batch_size={run.batch_size!r} must be >= 1 (or null: the device's default)")
    if run.speed_samples < 1:
        raise RecdiffError(f"run.speed_samples={run.speed_samples!r} must be >= 1")
    if run.threads is not None and run.threads < 1:
        raise RecdiffError(f"run.threads={run.threads!r} must be >= 1 (or null: torch's default)")


def check_study(s: DictConfig, mode: str) -> None:
    if s.heartbeat_interval < 1:
        raise RecdiffError(f"study.heartbeat_interval={s.heartbeat_interval} must be >= 1 (seconds)")
    if s.grace_period <= s.heartbeat_interval:
        raise RecdiffError(f"study.grace_period={s.grace_period} must exceed study.heartbeat_interval="
                           f"{s.heartbeat_interval}, or live trials would count as dead")
    if s.max_retry < 0:
        raise RecdiffError(f"study.max_retry={s.max_retry} must be >= 0")
    if mode == "search" and s.n_trials < 1:
        raise RecdiffError(f"study.n_trials={s.n_trials} must be >= 1")


def check_sampler(cfg: DictConfig, searched: tuple[str, ...] = ()) -> None:
    """A grid trial's settings with all of the sampler's rules. In a search, the fixed settings and each end of the
    searched ranges on their own: combinations of sampled values are judged per trial (PRUNED when invalid)."""
    from recdiff.samplers import sampler_spec
    from recdiff.trial import check_combination, sampler_params

    name, params = str(cfg.sampler.name), sampler_params(cfg.sampler)
    if not searched:
        reason = check_combination(name, params)
        if reason:
            raise RecdiffError(reason)
        return
    spec = sampler_spec(name)
    for key, value in params.items():
        complaint = spec[key][1](value) if key in spec and key not in searched else None
        if complaint:
            raise RecdiffError(f"{name} sampler: {key}={value!r} {complaint}")
    for key in searched:
        dist = distribution(cfg.study.space[key])
        ends = getattr(dist, "choices", None) or (dist.low, dist.high)
        for end in ends:
            complaint = spec[key][1](end)
            if complaint:
                raise RecdiffError(f"study.space.{key}: {name} sampler: {key}={end!r} {complaint}")


def check_writable(path: Path, what: str) -> None:
    """Create ``path`` (a directory) if needed and a file in it, now rather than after the evaluation."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".recdiff-write-check-"):
            pass
    except OSError as e:
        raise RecdiffError(f"{what} {path} is not writable: {e.strerror or e}") from None


def storage_dir(url: str) -> Path | None:
    """The local directory a storage writes to (journal file or SQLite database), None for a server."""
    url = resolve_storage_url(url)
    if "://" not in url:
        return Path(url).parent
    if url.startswith("sqlite:///") and url.split(":///", 1)[1] not in ("", ":memory:"):
        return Path(url.split(":///", 1)[1]).expanduser().parent
    return None


def check_writable_outputs(cfg: DictConfig, job_dir: Path, top_dir: Path) -> None:
    """The sweep directory, the storage and the artifact directory."""
    check_writable(top_dir, "sweep directory")
    check_writable(job_dir, "job directory")
    where = storage_dir(str(cfg.study.storage))
    if where is not None:
        check_writable(where, "study.storage directory")
    journal = journal_path(str(cfg.study.storage))
    if journal is not None and journal.exists():
        try:
            open(journal, "ab").close()
        except OSError as e:
            raise RecdiffError(f"study.storage {journal} is not writable: {e.strerror or e}") from None
    check_writable(Path(str(cfg.study.artifact_dir)), "study.artifact_dir")
