"""One trial, apart from Optuna: the workload it runs on, how it is measured, how its samples are recorded.

- :mod:`~recdiff.trial.workload`: the benchmark slice and the model; :func:`prepare` checks, :meth:`Prepared.load`
  loads (cached per process)
- :mod:`~recdiff.trial.measure`: :func:`run_trial`, the accuracy pass and the timed speed pass → :class:`TrialResult`
- :mod:`~recdiff.trial.samples`: the per-sample table, scores, traces and the stability picture
- :mod:`~recdiff.trial.deadline`: ``run.timeout_s``
"""

from recdiff.trial.deadline import TrialTimeout, deadline
from recdiff.trial.measure import TrialResult, run_trial
from recdiff.trial.workload import Prepared, Workload, check_tokenizer, prepare

__all__ = ["TrialTimeout", "deadline", "TrialResult", "run_trial", "Prepared", "Workload", "check_tokenizer",
           "prepare"]
