"""How a trial ended, apart from Optuna: :class:`Outcome` (its state, objective values, attributes and artifacts) and
:func:`evaluate`, which measures a trial (:func:`~recdiff.trial.measure.run_trial`) and classifies how it ended.

A trial's own failure is an outcome, never an exception for the sweep: an invalid combination of settings is PRUNED
(``prune_reason``); a timeout, running out of memory, files that cannot be written (a full disk named as "no space
left on device") and any other error are FAIL with ``fail_kind`` and a one-line ``fail_reason``.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recdiff.errors import NO_SPACE, RecdiffError, no_space
from recdiff.trial.deadline import TrialTimeout

if TYPE_CHECKING:
    from recdiff.schema import TrialSpec

log = logging.getLogger("recdiff.study")


class State(enum.Enum):
    """How a trial ended; named as Optuna's trial states, which the study records them as."""
    COMPLETE = "COMPLETE"
    PRUNED = "PRUNED"
    FAIL = "FAIL"


@dataclass
class Outcome:
    state: State
    values: list[float] | None       # (accuracy, tokens_per_s) when COMPLETE
    attrs: dict[str, Any]            # the trial's user attributes: measurements, or why it did not complete
    artifacts: list[str]             # files stored with the trial (its picture, the per-sample table)


def evaluate(work: Any, trial: TrialSpec, output_dir: Path) -> Outcome:
    """Run one trial and classify how it ended; never raises for a trial's own failure."""
    import torch

    from recdiff import trial as trials  # the runner as the package names it (tests put a fake one there)

    try:
        res = trials.run_trial(work, trial, output_dir)
    except RecdiffError as e:
        return Outcome(State.PRUNED, None, {"prune_reason": f"invalid combination: {e}"}, [])
    except TrialTimeout as e:
        return Outcome(State.FAIL, None, {"fail_reason": str(e), "fail_kind": "timeout"}, [])
    except OSError as e:
        if e.errno not in NO_SPACE:
            return _error(e)
        where = e.filename or output_dir
        return Outcome(State.FAIL, None, {"fail_reason": f"cannot write the trial's files in {where}: {no_space(e)}",
                                          "fail_kind": "artifacts"}, [])
    except (torch.OutOfMemoryError, MemoryError) as e:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return Outcome(State.FAIL, None, {"fail_reason": f"out of memory: {_first_line(e) or type(e).__name__}",
                                          "fail_kind": "oom"}, [])
    except Exception as e:  # noqa: BLE001 — any other error of the trial is recorded, the sweep goes on
        return _error(e)
    artifacts = [p for p in (res.picture, str(Path(res.attrs["output_dir"]) / "samples.csv")) if p]
    return Outcome(State.COMPLETE, [res.accuracy, res.tokens_per_s], res.attrs, artifacts)


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else ""


def _error(e: Exception) -> Outcome:
    log.exception("trial raised")
    return Outcome(State.FAIL, None, {"fail_reason": f"{type(e).__name__}: {_first_line(e)}".rstrip(": "),
                                      "fail_kind": "error"}, [])
