"""The Hydra job, in phases that run one way: plan → prepare → open the study → load the model → the job.

1. **plan**: the typed plan, every setting checked (:func:`recdiff.schema.make_plan`);
2. **prepare**: write access, the benchmark slice, the checkpoint and its tokenizer (:func:`recdiff.trial.prepare`);
3. **open the study**: the trials' identity (the device included: named without loading a model), refused when the
   study holds trials measured otherwise; ``study.json``;
4. **load the model** (cached per process), in a grid job only once it has taken its configuration (claimed it, or
   found it COMPLETE, waiting while another live process holds it) and only when something is to be measured;
5. **the job**: the baselines a grid job owes and its trial (:mod:`~recdiff.study.grid`,
   :mod:`~recdiff.study.baselines`), or an ask/tell loop (:mod:`~recdiff.study.search`).

A failure in phases 1-3 is a configuration error: one :class:`RecdiffError` line, nothing recorded, no model loaded.
Torch's CPU threads are the job's share of the machine from its start (:mod:`~recdiff.study.resources`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from omegaconf import DictConfig

from recdiff.device import describe
from recdiff.digest import weights_digest
from recdiff.schema import Config, Mode, make_plan
from recdiff.study.connect import open_storage, open_study, resolve_storage_url
from recdiff.study.grid import run_grid_trial
from recdiff.study.identity import check_identity, identity_from_config
from recdiff.study.interrupt import interrupt_on_sigterm
from recdiff.study.resources import thread_budget
from recdiff.study.results import write_json
from recdiff.study.search import make_sampler, run_search
from recdiff.study.writable import check_writable_outputs

if TYPE_CHECKING:
    from recdiff.trial import Prepared


def _launcher() -> dict[str, Any]:
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    return OmegaConf.to_container(HydraConfig.get().launcher, resolve=True)


def _sweep_dirs() -> tuple[Path, Path]:
    """(this job's output dir, the dir of the whole run/multirun)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    job = Path(hc.runtime.output_dir)
    top = Path(hc.sweep.dir) if hc.mode == RunMode.MULTIRUN else Path(hc.run.dir)
    return job, top


def open_checked_study(plan: Config, prepared: Prepared, top_dir: Path) -> tuple[optuna.Study, dict[str, Any]]:
    """The study and this job's identity (the plan's, with the weights' digest, the dtype, the benchmark's own facts
    and the device); a study holding trials measured otherwise (another device too) is refused in one line."""
    from recdiff.checkpoint import weight_files

    s = plan.study
    identity = identity_from_config(plan.as_dict(), weights=weights_digest(weight_files(prepared.folder)),
                                    dtype=prepared.dtype, benchmark=prepared.benchmark.identity(),
                                    device=describe(prepared.device).identity())
    storage = open_storage(s.storage, s.heartbeat_interval, s.grace_period, s.max_retry)
    study = open_study(s, storage, make_sampler(s, plan.worker) if s.mode == Mode.search else None)
    check_identity(study, identity)
    write_json(top_dir / "study.json", {"storage": resolve_storage_url(s.storage), "study_name": study.study_name,
                                        "artifact_dir": str(Path(s.artifact_dir).resolve())})
    return study, identity


def run_job(cfg: DictConfig) -> tuple[float, float] | None:
    """The Hydra task: the composed config in, the grid trial's objective values out (None for a search)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)   # one line per trial is ours
    interrupt_on_sigterm()
    plan = make_plan(cfg)                                                   # 1. plan
    job_dir, top_dir = _sweep_dirs()
    check_writable_outputs(plan.study, job_dir, top_dir)                    # 2. prepare
    # torch only now: bad input above is one line a second sooner (torch is most of a failing command's time)
    import torch

    from recdiff.trial import prepare

    threads = thread_budget(plan.run.threads, _launcher())
    torch.set_num_threads(threads)
    prepared = prepare(plan.model, plan.benchmark)
    study, identity = open_checked_study(plan, prepared, top_dir)           # 3. open the study
    preset = getattr(plan.sampler, "preset", None)
    if preset is not None:   # a tuned preset (sampler=tuned/<name>) on another device, model or batch: one line
        from recdiff.presets import mismatch

        warning = mismatch(preset, describe(prepared.device), identity["model"].get("weights"),
                           plan.run.timing_batch)
        if warning:
            logging.getLogger("recdiff.study").warning(warning)

    def load() -> Any:                                                      # 4. the model, when needed
        return prepared.load(threads)

    if plan.study.mode == Mode.search:                                      # 5. the job
        run_search(plan, study, load(), job_dir, identity)
        return None
    return run_grid_trial(plan, study, load, job_dir, identity,
                          baselines_dir=top_dir / "baselines" if plan.study.baselines else None)
