"""The sweep's exit status: a sweep that recorded trials and completed none of them, or that ends with configurations
neither COMPLETE nor recorded by it, exits non-zero (and prints no closing table).

A Hydra callback (``conf/hydra/default.yaml``) tags the run with a token that every ``result.json`` of it carries
(launchers start jobs in other processes, so the token travels in the environment), and at the end counts the
states of the results under the run or sweep directory (the baselines it recorded apart: a sweep whose own trials all
failed exits non-zero) and writes those counts to ``sweep.json`` there (:data:`SUMMARY_FILE`: what ran, for a
program that starts sweeps, such as ``python -m analysis paper``). ``sweep.py`` reads :data:`LAST` after Hydra returns.

When a sweep ends early (a joblib worker killed, Ctrl-C), :func:`settle` fails the trials whose workers died on this
machine at once and re-queues them, so that the study holds no RUNNING trial of a dead process.

The summary also holds the identities of the sweep's trials, for the closing speed-up table that ``sweep.py`` prints
with the analysis (the library does not import the analysis, which is built on it).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from recdiff.study.results import SWEEP_TOKEN_ENV

SUMMARY_FILE = "sweep.json"
# what became of each configuration a sweep's jobs met (baselines included), by its result.json: see :func:`kind`
KINDS = ("measured", "reused", "already_in_study", "running_elsewhere", "retries_exhausted", "failed", "pruned")
MISSING = ("running_elsewhere", "retries_exhausted")   # neither COMPLETE nor recorded by this sweep


def kind(result: dict[str, Any]) -> str:
    """``measured`` (computed by this sweep), ``reused`` (copied from another study of the storage that measured the
    same configuration under the same identity), ``already_in_study`` (this study held it COMPLETE: skipped),
    ``running_elsewhere`` (claimed by another process: results of older versions, which did not wait),
    ``retries_exhausted`` (its worker died more than ``study.max_retry`` times: not run again), ``failed``,
    ``pruned``."""
    state = result.get("state")
    if state == "SKIPPED":
        return "retries_exhausted" if result.get("retries_exhausted") else "running_elsewhere"
    if state == "COMPLETE":
        if result.get("skipped_duplicate"):
            return "already_in_study"
        return "reused" if "reused_from" in (result.get("user_attrs") or {}) else "measured"
    return "failed" if state == "FAIL" else "pruned"


@dataclass
class Summary:
    root: Path
    token: str = ""
    states: Counter = field(default_factory=Counter)
    baselines: Counter = field(default_factory=Counter)      # states of the baselines this sweep recorded
    kinds: Counter = field(default_factory=Counter)          # :func:`kind` of every result, baselines included
    identities: list[Any] = field(default_factory=list)     # of this sweep's trials (skipped duplicates included)

    def to_json(self) -> dict[str, Any]:
        return {"token": self.token, "states": dict(self.states), "baselines": dict(self.baselines),
                "counts": {k: self.kinds[k] for k in KINDS}}

    @property
    def nothing_completed(self) -> bool:
        """Trials were recorded, and none of them COMPLETE (a skipped duplicate of a COMPLETE trial counts)."""
        recorded = sum(n for s, n in self.states.items() if s != "SKIPPED")
        return recorded > 0 and self.states["COMPLETE"] == 0

    @property
    def missing(self) -> int:
        """Configurations this sweep met that are neither COMPLETE nor recorded by it."""
        return sum(self.kinds[k] for k in MISSING)

    def __str__(self) -> str:
        if self.missing:
            why = ", ".join(f"{self.kinds[k]} {k.replace('_', ' ')}" for k in MISSING if self.kinds[k])
            return (f"{self.missing} configuration{'s' if self.missing > 1 else ''} of this sweep not recorded "
                    f"({why}; study.max_retry limits how often a configuration whose worker died runs again); see "
                    f"{self.root}")
        counts = ", ".join(f"{n} {s}" for s, n in sorted(self.states.items()))
        return f"no trial of this sweep completed ({counts}); see {self.root}"


LAST: Summary | None = None
ROOT: Path | None = None   # the run or sweep directory of the sweep under way (set when it starts)


def summarize(root: Path, token: str) -> Summary:
    summary = Summary(root, token)
    for f in root.rglob("result.json"):
        try:
            data = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if data.get("sweep_token") != token:
            continue
        (summary.baselines if data.get("baseline") else summary.states)[str(data.get("state"))] += 1
        summary.kinds[kind(data)] += 1
        identity = (data.get("user_attrs") or {}).get("identity")
        if identity is not None and identity not in summary.identities:
            summary.identities.append(identity)
    return summary


def worker_lost(exc: BaseException) -> str | None:
    """One line for a launcher's report that a worker process died (joblib's ``TerminatedWorkerError``); None for
    anything else."""
    if type(exc).__name__ != "TerminatedWorkerError":
        return None
    codes = re.search(r"exit codes of the workers are (\{[^}]*\})", str(exc))
    return (f"a joblib worker process died{f' (exit codes {codes.group(1)})' if codes else ''}: the sweep stopped; "
            "its trials are FAIL (worker_died) and re-queued: run the same command again to finish")


def settle(root: Path | None, wait_s: float = 10) -> list[int]:
    """Fail and re-queue the RUNNING trials of the sweep's study whose process has ended on this machine (after a
    sweep that ended early); the trial ids. Workers of this sweep that the launcher is still ending (joblib kills the
    others when one dies) are waited for, up to ``wait_s``. Best effort: whatever it cannot do, the next sweep does."""
    if root is None or not (root / "study.json").is_file():
        return []
    try:
        import optuna
        from optuna.trial import TrialState

        from recdiff.study import claimant
        from recdiff.study.connect import open_storage
        from recdiff.study.storage import CLAIMANT_ATTR, fail_stale_trials

        info = json.loads((root / "study.json").read_text())
        study = optuna.load_study(study_name=info["study_name"], storage=open_storage(info["storage"], patience_s=5))
        failed, deadline = [], time.monotonic() + wait_s
        while True:
            failed += fail_stale_trials(study)
            ours = [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                    if claimant.is_child(t.system_attrs.get(CLAIMANT_ATTR))]
            if not ours or time.monotonic() > deadline:
                return failed
            time.sleep(0.1)
    except Exception:  # noqa: BLE001 — the sweep's own error is the one to report
        return []


class SweepStatus(Callback):
    def _start(self, root: str) -> None:
        global LAST, ROOT
        LAST, ROOT = None, Path(root)
        os.environ[SWEEP_TOKEN_ENV] = uuid.uuid4().hex

    def _end(self, root: str) -> None:
        global LAST
        token = os.environ.get(SWEEP_TOKEN_ENV)
        if token:
            LAST = summarize(Path(root), token)
            try:
                (Path(root) / SUMMARY_FILE).write_text(json.dumps(LAST.to_json(), indent=2) + "\n")
            except OSError as exc:  # the trials are recorded; only this summary is missing
                print(f"sweep summary not written: {exc}", file=sys.stderr, flush=True)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._start(config.hydra.run.dir)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._start(config.hydra.sweep.dir)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._end(config.hydra.run.dir)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._end(config.hydra.sweep.dir)
