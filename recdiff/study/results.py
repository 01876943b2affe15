"""The files a sweep writes beside its study: each job's ``result.json`` and each sweep's ``study.json``, written
atomically; and the token that marks the results of one sweep (:mod:`~recdiff.study.sweep_status` counts them)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recdiff.errors import SweepStopped, no_space

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

    from recdiff.trial.outcome import Outcome

# Set by the sweep's Hydra callback (recdiff.study.sweep_status); launchers start jobs in other processes, so the
# token travels in the environment.
SWEEP_TOKEN_ENV = "RECDIFF_SWEEP_TOKEN"


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomic: several jobs may write the same file. A file that cannot be written (a full disk) stops the sweep in
    one line; what the study recorded stays."""
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
    values = dict(zip(("accuracy", "tokens_per_s"), outcome.values)) if outcome.values else None
    write_json(output_dir / "result.json", {
        "params": params, "values": values, "user_attrs": outcome.attrs, "state": outcome.state.name,
        "trial_number": trial.number if trial is not None else None, "sweep_token": os.environ.get(SWEEP_TOKEN_ENV),
        **(extra or {})})
