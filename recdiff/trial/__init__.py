"""One trial, apart from Optuna: the workload it runs on, how it is measured, how it ended, how its samples are
recorded. The measuring modules (torch) load on first use, so that the study's recording path imports
:class:`Outcome` without them.

- :mod:`~recdiff.trial.workload`: the benchmark slice and the model; :func:`prepare` checks, :meth:`Prepared.load`
  loads (cached per process)
- :mod:`~recdiff.trial.measure`: :func:`run_trial`, the accuracy pass and the timed speed pass → :class:`TrialResult`
- :mod:`~recdiff.trial.outcome`: :func:`evaluate`, a trial run and how it ended (:class:`Outcome`): its failures
  classified, never raised
- :mod:`~recdiff.trial.provenance`: where and how it was measured (git commit, device, library versions)
- :mod:`~recdiff.trial.samples`: the per-sample table, scores, traces and the stability picture
- :mod:`~recdiff.trial.deadline`: ``run.timeout_s``
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "TrialTimeout": "recdiff.trial.deadline",
    "deadline": "recdiff.trial.deadline",
    "TrialResult": "recdiff.trial.measure",
    "run_trial": "recdiff.trial.measure",
    "Outcome": "recdiff.trial.outcome",
    "State": "recdiff.trial.outcome",
    "evaluate": "recdiff.trial.outcome",
    "provenance": "recdiff.trial.provenance",
    "Prepared": "recdiff.trial.workload",
    "Workload": "recdiff.trial.workload",
    "check_tokenizer": "recdiff.trial.workload",
    "prepare": "recdiff.trial.workload",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'recdiff.trial' has no attribute {name!r}")


__all__ = list(_LAZY)
