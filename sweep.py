"""Sweep entry point: ``python sweep.py -m sampler.r_inner=1,2,4,8`` (see README and sweeps/README.md).

Each Hydra job either runs one trial and records it in the Optuna study (``study.mode=grid``) or runs an
ask/tell loop until the study holds ``study.n_trials`` trials (``study.mode=search``). Everything but the
entry point lives in :mod:`recdiff.study` (Optuna), :mod:`recdiff.trial` (a trial's measurements),
:mod:`recdiff.schema` (the typed plan) and, for the closing speed-up table, :mod:`analysis.speedup`. The paper's
recipes (``sweeps=<recipe>``) are on Hydra's search path through the plugin ``hydra_plugins/recdiff_recipes.py``.
Bad input (a config typo, a wrong type, an out-of-range setting, an unknown or unwritable storage, a missing model)
ends with one line ``error: ...`` on stderr and exit code 2, before any model loads and with nothing recorded
(``RECDIFF_TRACEBACK=1`` shows the traceback instead). A sweep that recorded trials and completed none, that lost a
worker or its storage, or that ends with configurations neither COMPLETE nor recorded by it exits 1 with one line.
A sweep that ends well prints its closing speed-up table, then what to look at next (:func:`next_steps`): the command
that draws its Pareto figure and writes its report, and the dashboard's.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any


def _interrupted_while_loading(signum: int, frame: Any) -> None:
    sys.stdout.flush()
    print("error: interrupted", file=sys.stderr, flush=True)
    os._exit(130)   # nothing is recorded yet; and no import half done may swallow the exit


if __name__ == "__main__":   # Ctrl-C while the libraries load: one line; cli() restores Python's handler
    signal.signal(signal.SIGINT, _interrupted_while_loading)

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

import recdiff.schema  # noqa: E402,F401  (registers the structured-config schemas)


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> tuple[float, float] | None:
    from recdiff.errors import SweepStopped, describe_error
    from recdiff.study import interrupted, run_job

    try:
        return run_job(cfg)
    except Exception as exc:  # Hydra would add its own lines around a job's exception: end here instead
        if os.environ.get("RECDIFF_TRACEBACK"):
            raise
        if interrupted(exc):
            raise KeyboardInterrupt from None
        print(f"error: {describe_error(exc)}", file=sys.stderr, flush=True)
        raise SystemExit(1 if isinstance(exc, SweepStopped) else 2) from None


def print_speedup_table(root: Path, identities: list[Any]) -> None:
    """The study's COMPLETE trials of the sweep's identities, relative to the study's reference (``run.reference``,
    static AR at r=32 by default): accuracy, tokens/s, the paired speed-up and the accuracy change in points, each with
    its 95% interval (``analysis.speedup.speedup_table``, the numbers of the report and Table 1). Nothing when the
    sweep recorded no identity; a table that cannot be made is one line on stderr, never a failed sweep (the trials
    are recorded; only the summary is missing)."""
    if not identities or not (root / "study.json").is_file():
        return
    try:
        import polars as pl

        from analysis.reference import reference_label
        from analysis.speedup import format_speedup, speedup_table
        from analysis.trials import load_trials
        from recdiff.study import identity_key

        df = load_trials(root)
        df = df.filter(pl.col("identity").is_in([identity_key(i) for i in identities]))
        table = speedup_table(df)
        name, reference = df["study"][0], reference_label(df)
        text = format_speedup(table, reference=reference)
    except Exception as exc:  # noqa: BLE001
        print(f"speed-up table: not shown ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})",
              file=sys.stderr, flush=True)
        return
    print(f"\nstudy {name}: {table.height} trials, relative to {reference}\n{text}", flush=True)


def _shown(path: str | Path) -> str:
    """A path as typed from here: relative below the working directory; a storage URL without its password."""
    text = str(path)
    if "://" in text:
        from sqlalchemy.engine import make_url

        try:
            return make_url(text).render_as_string(hide_password=True)
        except Exception:  # noqa: BLE001  (not SQLAlchemy's: shown as it is)
            return text
    p = Path(text).absolute()
    return str(p.relative_to(Path.cwd())) if p.is_relative_to(Path.cwd()) else str(p)


def next_steps(root: Path) -> list[str]:
    """What to look at once the sweep is over, for the study of ``root/study.json``: the command that draws its Pareto
    figure and writes its report (``python -m analysis report``, into ``outputs/<study>/``), and the dashboard's
    (``make dashboard`` where the study is in the default storage)."""
    import json
    import shlex

    from analysis.trials import DEFAULT_STORAGE

    info = json.loads((root / "study.json").read_text())
    storage, name, artifacts = str(info["storage"]), str(info["study_name"]), info.get("artifact_dir")
    default = "://" not in storage and Path(storage).resolve() == DEFAULT_STORAGE.resolve()
    here = Path(sys.executable).parent
    python = _shown(sys.executable) if Path(sys.executable).absolute().is_relative_to(Path.cwd()) else "python"
    dashboard = here / "optuna-dashboard"
    dashboard_cmd = shlex.join([_shown(dashboard) if dashboard.exists() else "optuna-dashboard", _shown(storage),
                                *(["--artifact-dir", _shown(artifacts)] if artifacts else [])])
    source = [name] if default else [_shown(storage), "--study-name", name]
    out = Path("outputs") / name
    default_artifacts = artifacts is not None and Path(artifacts).resolve() == \
        (DEFAULT_STORAGE.parent / "artifacts").resolve()
    return [f"figure and report: {shlex.join([python, '-m', 'analysis', 'report', *source])}   "
            f"(writes {out / 'pareto.png'} and {out / 'report.md'})",
            f"dashboard: make dashboard   ({dashboard_cmd})" if default and default_artifacts else
            f"dashboard: {dashboard_cmd}"]


def print_next_steps(root: Path) -> None:
    """:func:`next_steps`, printed after the closing table; nothing without a study.json (no trial recorded)."""
    if not (root / "study.json").is_file():
        return
    try:
        lines = next_steps(root)
    except Exception as exc:  # noqa: BLE001  (the trials are recorded: only the pointers are missing)
        print(f"next steps: not shown ({type(exc).__name__}: {exc})".splitlines()[0], file=sys.stderr, flush=True)
        return
    print("\n".join(lines), flush=True)   # the table ends with an empty line


def cli(argv: list[str] | None = None) -> int:
    """Exit status: 0; 1 when the sweep recorded trials and completed none, lost a worker (a killed joblib worker, a
    SLURM job without a result) or its storage, or ends with configurations neither COMPLETE nor recorded by it; 2
    for bad input (one line); 130 when interrupted (Ctrl-C, SIGTERM, a cancelled SLURM job)."""
    from recdiff.study import interrupt_on_sigterm, sweep_status

    argv = list(sys.argv[1:] if argv is None else argv)
    # Exceptions reach us instead of Hydra's multi-line report; we print one line.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    # a killed joblib worker leaves semaphores that multiprocessing's tracker warns about at exit: one line is ours
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"),
                                                          "ignore:resource_tracker:UserWarning"]))
    sys.argv = [sys.argv[0], *argv]
    signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupt_on_sigterm()
    try:
        main()
    except KeyboardInterrupt:
        sweep_status.settle(sweep_status.ROOT)
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # composition errors, RecdiffError, unknown storage, a SLURM job without result ...
        from recdiff.errors import describe_error
        from recdiff.study import interrupted, job_failure

        if os.environ.get("RECDIFF_TRACEBACK"):
            raise
        if interrupted(exc):   # a library's cleanup failed on the way out of the interrupt
            sweep_status.settle(sweep_status.ROOT)
            print("error: interrupted", file=sys.stderr)
            return 130
        if (failed := job_failure(exc)) is not None:
            print(f"error: {failed[0]}", file=sys.stderr)
            return failed[1]
        if (lost := sweep_status.worker_lost(exc)) is not None:
            sweep_status.settle(sweep_status.ROOT)
            print(f"error: {lost}", file=sys.stderr)
            return 1
        print(f"error: {describe_error(exc)}", file=sys.stderr)
        return 2
    last = sweep_status.LAST
    if last is not None and (last.missing or last.nothing_completed):   # never a table that looks complete
        print(f"error: {last}", file=sys.stderr)
        return 1
    if last is not None:
        try:
            print_speedup_table(last.root, last.identities)
            print_next_steps(last.root)
        except KeyboardInterrupt:   # the trials are recorded: only the summary is cut short
            print("error: interrupted", file=sys.stderr)
            return 130
    return 0


if __name__ == "__main__":
    status = cli()
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the sweep is over: a late Ctrl-C cannot turn its exit into a crash
    sys.exit(status)
