"""The sweep's typed plan: structured configs registered in Hydra's ConfigStore, checked when the plan is built.

Hydra composes ``conf/`` over these dataclasses, so a misspelled key (``sampler.r_innr=4``) or a wrong type
(``sampler.r_inner=four``) fails while it composes. :func:`make_plan` then builds the typed plan once
(``OmegaConf.to_object``): every other check of a setting runs in the dataclasses' ``__post_init__``, as one
:class:`RecdiffError` line, before anything is opened or loaded. The study's modules receive parts of the plan (the
study's :class:`StudyConfig`, the trial's :class:`TrialSpec`), never the composed ``DictConfig``; a trial's
``config_hash`` and ``identity`` come from the plan (:meth:`Config.as_dict`, ``recdiff/study/identity.py``).

The samplers' nodes (``sampler/<name>``) and the default search space (``study/space/default``) are the parameter
declarations of :mod:`recdiff.params`. Field names are the names used everywhere (config key = Optuna parameter =
analysis column); see ``docs/architecture.md``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from recdiff.checks import is_int, temperature, top_p
from recdiff.errors import RecdiffError
from recdiff.params import SAMPLER_PARAMS, ParamSpace, ParamType, SamplerParams, default_space, parse_sampler


class Mode(str, Enum):
    grid = "grid"            # each Hydra job runs one trial and records it
    search = "search"        # each Hydra job runs an ask/tell loop until the study holds n_trials


class Algorithm(str, Enum):
    nsga2 = "nsga2"
    tpe = "tpe"
    gp = "gp"
    grid = "grid"
    random = "random"


class Tokenizer(str, Enum):
    checkpoint = "checkpoint"  # the checkpoint's tokenizer.json (an error when it has none)
    bytes = "bytes"            # UTF-8 bytes as token ids: only for checkpoints without a tokenizer (the test fixture)


# ------------------------------------------------------------------------------------------- benchmark
# The choices of the `benchmark` parameter; their order is part of every recorded distribution, so new names go last.
BENCHMARKS = ("compose", "arith", "gsm8k", "math500", "minerva_math", "humaneval", "mbpp", "lm_eval")
INTEGER_OPTIONS = ("limit", "offset", "seed", "n_shot")   # benchmark options that must be integers


def benchmark_label(benchmark: Any) -> str:
    """What a study calls its benchmark: its name, or for ``benchmark=lm_eval`` the lm-eval task
    (``embedded-gsm8k_cot``, not ``embedded-lm_eval`` for every task)."""
    name, task = benchmark.get("name"), benchmark.get("task")
    return str(task) if name == "lm_eval" and task else str(name)


# ----------------------------------------------------------------------------------------------- model
def model_name(path: str) -> str:
    """A model's default name: the last part of its path or hub id (``recdiff/assets/embedded`` → ``embedded``)."""
    return str(path).rstrip("/").rsplit("/", 1)[-1] or str(path)


@dataclass
class ModelConfig:
    name: str = "${recdiff.model_name:${.path}}"   # names the study; follows model.path unless set
    path: str = MISSING               # local folder or Hugging Face hub id; "recdiff/..." = package data
    device: str = "auto"              # auto | cpu | cuda | cuda:N
    dtype: Optional[str] = None       # null = the checkpoint's dtype; float32 | bfloat16 | float16
    tokenizer: Tokenizer = Tokenizer.checkpoint
    compile: bool = False             # compiled decoding (CPU: torch.compile; CUDA: CUDA graphs of whole steps)
    family: Optional[str] = None      # model family (recdiff.families); null = recognised from the checkpoint

    def __post_init__(self) -> None:
        if self.family is not None:
            from recdiff.families import get_family

            get_family(self.family)  # an unknown name is one line naming the families


# ----------------------------------------------------------------------------------------------- study
@dataclass
class StudyConfig:
    name: str = MISSING
    # A path = Optuna journal file (safe for several processes on one machine);
    # sqlite:///path.db or postgresql://user@host:port/db = RDB storage.
    storage: str = "outputs/optuna/journal.log"
    artifact_dir: str = "outputs/optuna/artifacts"
    directions: List[str] = field(default_factory=lambda: ["maximize", "maximize"])
    metric_names: List[str] = field(default_factory=lambda: ["accuracy", "tokens_per_s"])
    mode: Mode = Mode.grid
    algorithm: Algorithm = Algorithm.nsga2
    n_trials: int = 16                    # the study's total (a resumed study runs only what is missing)
    search: List[str] = field(default_factory=list)   # keys of `space` searched in mode=search
    space: Dict[str, ParamSpace] = field(default_factory=dict)
    seed: Optional[int] = None            # Optuna sampler seed
    population_size: int = 8              # NSGA-II
    skip_duplicates: bool = True          # an identical configuration already COMPLETE is not re-run
    # grid mode: a configuration COMPLETE in another study of the storage under the same identity is copied, not re-run
    reuse: bool = True
    # grid mode: also record the baselines (static AR r=32/4/8, adaptive, speculative, LoopSpec) once per identity
    # (recdiff/study/baselines.py); a searched study does not (its sampler would see their parameters)
    baselines: bool = True
    heartbeat_interval: int = 10          # seconds between heartbeats of a RUNNING trial
    grace_period: int = 60                # a RUNNING trial without heartbeat for this long is failed
    max_retry: int = 2                    # a trial whose worker died is re-queued at most this often
    max_duplicates: int = 32              # consecutive duplicate proposals before the space counts as exhausted

    def __post_init__(self) -> None:
        if self.heartbeat_interval < 1:
            raise RecdiffError(f"study.heartbeat_interval={self.heartbeat_interval} must be >= 1 (seconds)")
        if self.grace_period <= self.heartbeat_interval:
            raise RecdiffError(f"study.grace_period={self.grace_period} must exceed study.heartbeat_interval="
                               f"{self.heartbeat_interval}, or live trials would count as dead")
        if self.max_retry < 0:
            raise RecdiffError(f"study.max_retry={self.max_retry} must be >= 0")
        if self.mode == Mode.search and self.n_trials < 1:
            raise RecdiffError(f"study.n_trials={self.n_trials} must be >= 1")
        directions = [str(d) for d in self.directions]
        if len(self.metric_names) != len(directions) or any(d not in ("maximize", "minimize") for d in directions):
            raise RecdiffError(f"study.directions={directions} must be maximize/minimize, one per study.metric_names")


# ------------------------------------------------------------------------------------------------- run
# The sampler every trial's speed-up is timed against (recdiff/trial/measure.py): static AR at r=32, the paper's.
DEFAULT_REFERENCE = "static r=32"
# Torch threads while timing batch 1: a tiny model gains nothing from a second thread, and a second thread beside a
# busy process collapses (OpenMP spin-waits; docs/speed.md, "Threads while timing").
DEFAULT_TIMING_THREADS = 1


def reference_sampler(reference: str) -> SamplerParams:
    """The sampler settings ``run.reference`` names (:func:`recdiff.params.parse_sampler`), or one
    :class:`RecdiffError` line."""
    try:
        return parse_sampler(reference)
    except RecdiffError as err:
        raise RecdiffError(f"run.reference={reference!r}: {err} (e.g. \"run.reference='static r=32'\")") from None


@dataclass
class RunConfig:
    """How a trial generates and measures: the same rules as ``recdiff.generate``, and the runner's own."""

    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    batch_size: Optional[int] = None      # sequences decoded side by side for accuracy (null = per-device default)
    speed_samples: int = 3                # problems timed one at a time (batch 1), in run.repeats rounds
    repeats: int = 3                      # rounds of paired timing: each timed problem, sampler then reference
    reference: str = DEFAULT_REFERENCE    # the sampler every speed-up is timed against, in the same rounds
    timing_threads: Optional[int] = DEFAULT_TIMING_THREADS   # torch threads while timing (null = the job's threads)
    timing_batch: int = 1                 # sequences per timed call: 1 = the paper's tokens/s; B = a batch's throughput
    warmup: int = 1                       # untimed generate calls before measuring
    n_traces: int = 2                     # samples whose diffusion trace is saved (stability pictures)
    timeout_s: Optional[float] = None     # per trial; the trial is FAIL when it runs longer
    threads: Optional[int] = None         # torch CPU threads (null = the job's share: cores ÷ workers on the machine)
    progress: bool = True                 # tqdm bar over the samples (stderr)

    def __post_init__(self) -> None:
        if not is_int(self.max_new_tokens) or self.max_new_tokens < 1:
            raise RecdiffError(f"run.max_new_tokens={self.max_new_tokens!r} must be an integer >= 1")
        for name, check in (("temperature", temperature), ("top_p", top_p)):
            complaint = check(getattr(self, name))
            if complaint:
                raise RecdiffError(f"run.{name}={getattr(self, name)!r} {complaint}")
        for name in ("warmup", "n_traces"):
            if getattr(self, name) < 0:
                raise RecdiffError(f"run.{name}={getattr(self, name)!r} must be >= 0")
        if self.timeout_s is not None and not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise RecdiffError(f"run.timeout_s={self.timeout_s!r} must be a number > 0 (or null: no limit)")
        if self.batch_size is not None and self.batch_size < 1:
            raise RecdiffError(f"run.batch_size={self.batch_size!r} must be >= 1 (or null: the device's default)")
        if self.speed_samples < 1:
            raise RecdiffError(f"run.speed_samples={self.speed_samples!r} must be >= 1")
        if self.threads is not None and self.threads < 1:
            raise RecdiffError(f"run.threads={self.threads!r} must be >= 1 (or null: the job's share of the cores)")
        if not is_int(self.repeats) or self.repeats < 2:
            raise RecdiffError(f"run.repeats={self.repeats!r} must be an integer >= 2 (rounds of paired timing; "
                               "an interval needs two)")
        if self.timing_threads is not None and self.timing_threads < 1:
            raise RecdiffError(f"run.timing_threads={self.timing_threads!r} must be >= 1 (or null: the job's threads)")
        if not is_int(self.timing_batch) or self.timing_batch < 1:
            raise RecdiffError(f"run.timing_batch={self.timing_batch!r} must be an integer >= 1 (sequences per timed "
                               "call; 1 = batch-1 tokens/s)")
        self.reference_sampler()

    def reference_sampler(self) -> SamplerParams:
        """The reference every trial is timed against (``run.reference``), as sampler settings."""
        return reference_sampler(self.reference)


@dataclass(frozen=True)
class TrialSpec:
    """What one trial runs: the sampler's settings and how to generate and measure."""

    sampler: SamplerParams
    run: RunConfig


# ------------------------------------------------------------------------------------------------ plan
def _plain(value: Any) -> Any:
    """Nested dataclasses, dicts and lists as JSON-like values, enums as their values: what OmegaConf's
    ``to_container(enum_to_str=True)`` gives for the composed config, without a round trip through OmegaConf (a few
    hundred times slower, and a trial needs it several times)."""
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value.value if isinstance(value, Enum) else value


@dataclass
class Config:
    model: ModelConfig = MISSING
    sampler: SamplerParams = MISSING      # one of recdiff.params.SAMPLER_PARAMS (chosen by the sampler/ group)
    benchmark: Any = MISSING              # options of recdiff.benchmarks.get_benchmark (+ name)
    study: StudyConfig = MISSING
    run: RunConfig = field(default_factory=RunConfig)
    worker: int = 0                       # index of an ask/tell worker (sweep it to start several)

    def __post_init__(self) -> None:
        for key in INTEGER_OPTIONS:
            v = self.benchmark.get(key)
            if v is not None and not is_int(v):
                raise RecdiffError(f"benchmark.{key}={v!r} must be an integer")
        if self.study.mode == Mode.search:
            self._check_search()
        else:
            reason = self.sampler.complaint()
            if reason:
                raise RecdiffError(reason)
            self.grid_params()

    def _check_search(self) -> None:
        """In a search, the fixed settings and each end of the searched ranges on their own: combinations of sampled
        values are judged per trial (PRUNED when invalid)."""
        searched = self.search_space()
        name, spec = self.sampler.name, self.sampler.spec()
        for key, value in self.sampler.params().items():
            complaint = spec[key][1](value) if key not in searched else None
            if complaint:
                raise RecdiffError(f"{name} sampler: {key}={value!r} {complaint}")
        for key, dist in searched.items():
            for end in getattr(dist, "choices", None) or (dist.low, dist.high):
                complaint = spec[key][1](end)
                if complaint:
                    raise RecdiffError(f"study.space.{key}: {name} sampler: {key}={end!r} {complaint}")

    # ---- the Optuna parameters
    def grid_params(self) -> dict[str, tuple[Any, Any]]:
        """(value, distribution) of every parameter of this trial: the sampler's set values, the sampler's and the
        benchmark's names."""
        values = {"sampler": self.sampler.name, "benchmark": str(self.benchmark["name"]), **self.sampler.params()}
        for name in values:
            if name not in self.study.space:
                raise RecdiffError(f"study.space has no entry for parameter {name!r}")
        return {k: self.study.space[k].recorded(k, v) for k, v in values.items()}

    def search_space(self) -> dict[str, Any]:
        """The distributions of the searched keys (``study.search``)."""
        keys = {f.name for f in self.sampler.declared()}
        space = {}
        for name in self.study.search:
            if name not in keys:
                raise RecdiffError(f"study.search: {name!r} is not a setting of sampler {self.sampler.name!r} "
                                   f"(it has {', '.join(sorted(keys))})")
            if name not in self.study.space:
                raise RecdiffError(f"study.search: {name!r} has no entry in study.space")
            space[name] = self.study.space[name].distribution()
        if not space:
            raise RecdiffError("study.mode=search needs study.search (the keys to search, e.g. [r_inner, beta])")
        return space

    # ---- derived plans and views
    @property
    def trial(self) -> TrialSpec:
        return TrialSpec(sampler=self.sampler, run=self.run)

    def with_sampler(self, sampler: SamplerParams | None = None, **values: Any) -> "Config":
        """This plan with another sampler node (a baseline's) or other sampler values (a searched trial's)."""
        return dataclasses.replace(self, sampler=dataclasses.replace(sampler or self.sampler, **values))

    def as_dict(self) -> dict[str, Any]:
        """The resolved config as plain values: a trial's ``config`` user attribute, what its ``config_hash`` and
        ``identity`` are computed from (``recdiff/study/identity.py``)."""
        return _plain(self)


def make_plan(cfg: DictConfig) -> Config:
    """The typed plan of a composed config, every setting checked (one :class:`RecdiffError` line)."""
    return OmegaConf.to_object(cfg)


def register() -> None:
    """Store the schemas; config files extend them through their defaults lists."""
    OmegaConf.register_new_resolver("recdiff.model_name", model_name, replace=True)
    OmegaConf.register_new_resolver("recdiff.benchmark_label", benchmark_label, replace=True)
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    cs.store(group="model", name="model_schema", node=ModelConfig)
    cs.store(group="study", name="study_schema", node=StudyConfig)
    for name, params in SAMPLER_PARAMS.items():
        cs.store(group="sampler", name=name, node=params)
    space = {**default_space(),
             "sampler": ParamSpace(type=ParamType.categorical, choices=list(SAMPLER_PARAMS)),
             "benchmark": ParamSpace(type=ParamType.categorical, choices=list(BENCHMARKS))}
    cs.store(group="study/space", name="default", node=space)


register()
