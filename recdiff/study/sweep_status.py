"""The sweep's exit status: a sweep that recorded trials and completed none of them exits non-zero.

A Hydra callback (``conf/hydra/default.yaml``) tags the run with a token that every ``result.json`` of it carries
(launchers start jobs in other processes, so the token travels in the environment), and at the end counts the
states of the results under the run or sweep directory (the baselines it recorded apart: a sweep whose own trials all
failed exits non-zero) and writes those counts to ``sweep.json`` there (:data:`SUMMARY_FILE`: what ran, for a
program that starts sweeps, such as ``python -m analysis paper``). ``sweep.py`` reads :data:`LAST` after Hydra returns.

The summary also holds the identities of the sweep's trials, for the closing speed-up table that ``sweep.py`` prints
with the analysis (the library does not import the analysis, which is built on it).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from recdiff.study.record import SWEEP_TOKEN_ENV


SUMMARY_FILE = "sweep.json"
# what became of each configuration a sweep's jobs met (baselines included), by its result.json: see :func:`kind`
KINDS = ("measured", "reused", "already_in_study", "running_elsewhere", "failed", "pruned")


def kind(result: dict[str, Any]) -> str:
    """``measured`` (computed by this sweep), ``reused`` (copied from another study of the storage that measured the
    same configuration under the same identity), ``already_in_study`` (this study held it COMPLETE: skipped),
    ``running_elsewhere`` (claimed by another process), ``failed``, ``pruned``."""
    state = result.get("state")
    if state == "SKIPPED":
        return "running_elsewhere"
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

    def __str__(self) -> str:
        counts = ", ".join(f"{n} {s}" for s, n in sorted(self.states.items()))
        return f"no trial of this sweep completed ({counts}); see {self.root}"


LAST: Summary | None = None


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


class SweepStatus(Callback):
    def _start(self) -> None:
        global LAST
        LAST = None
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
        self._start()

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._start()

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._end(config.hydra.run.dir)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._end(config.hydra.sweep.dir)
