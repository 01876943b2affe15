"""Structured-config schemas for ``sweep.py``, registered in Hydra's ConfigStore.

Every key a user can override is a typed dataclass field, so a misspelled key (``sampler.r_innr=4``) or a
wrong type (``sampler.r_inner=four``) fails while Hydra composes the config, before any model loads.
:func:`describe_error` turns the resulting Hydra/OmegaConf exception into one line.

Field names are the names used everywhere (config key = Optuna parameter = analysis column); see
``docs/architecture.md``.  Sampler defaults are the paper's (Sec. 4): ε=0.03, β=0, η=0.1, r'=4, wavefront 128.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


class BetaSchedule(str, Enum):
    constant = "constant"
    dampened = "dampened"
    linear = "linear"
    sqrt = "sqrt"


class Freeze(str, Enum):
    fixed = "fixed"          # Algorithm 1: freeze after r recurrences per position
    adaptive = "adaptive"    # Algorithm 2: freeze once the latent change is below epsilon


class FreezeRule(str, Enum):
    prefix = "prefix"        # freeze up to k* with every compared position below epsilon (paper eq. conv)
    last = "last"            # freeze up to the last position below epsilon (Algorithm 2's wording)


class AdaptiveRule(str, Enum):
    paper = "paper"          # recdiff: aligned latent change, a converged state freezes what it predicts
    reference = "reference"  # the authors' code, bit for bit (fixtures, published runs)


class KVCache(str, Enum):
    shared = "shared"        # one K/V per layer and position (the paper's KV sharing)
    per_step = "per_step"


class Mode(str, Enum):
    grid = "grid"            # each Hydra job runs one trial and records it
    search = "search"        # each Hydra job runs an ask/tell loop until the study holds n_trials


class Algorithm(str, Enum):
    nsga2 = "nsga2"
    tpe = "tpe"
    gp = "gp"
    grid = "grid"
    random = "random"


class ParamType(str, Enum):
    int = "int"
    float = "float"
    categorical = "categorical"


class Tokenizer(str, Enum):
    checkpoint = "checkpoint"  # the checkpoint's tokenizer.json (an error when it has none)
    bytes = "bytes"            # UTF-8 bytes as token ids: only for checkpoints without a tokenizer (the test fixture)


class Fault(str, Enum):
    """Faults injected into a trial, for testing the failure handling (never set in a real sweep)."""

    error = "error"          # raise RuntimeError at the first sample
    oom = "oom"              # raise torch.OutOfMemoryError at the first sample
    hang = "hang"            # sleep forever at the first sample (the trial timeout must end it)
    kill = "kill"            # SIGKILL the worker process at the first sample
    invalid = "invalid"      # raise RecdiffError (an invalid combination) at the first sample


# ------------------------------------------------------------------------------------------- benchmark


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


# --------------------------------------------------------------------------------------------- samplers


@dataclass
class SamplerConfig:
    name: str = MISSING


@dataclass
class StaticSamplerConfig(SamplerConfig):
    name: str = "static"
    r: int = 32
    init_scale: float = 0.0
    kv_cache: KVCache = KVCache.shared


@dataclass
class AdaptiveSamplerConfig(SamplerConfig):
    name: str = "adaptive"
    r: int = 32
    epsilon: float = 0.03
    init_scale: float = 0.0
    kv_cache: KVCache = KVCache.shared
    exit_in_prefill: bool = True


@dataclass
class SpeculativeSamplerConfig(SamplerConfig):
    name: str = "speculative"
    r: int = 32
    r_draft: int = 4
    lookahead: int = 4
    init_scale: float = 0.0
    kv_cache: KVCache = KVCache.shared


@dataclass
class DiffusionSamplerConfig(SamplerConfig):
    name: str = "diffusion"
    r: int = 32
    r_inner: int = 4
    beta: float = 0.0
    beta_schedule: BetaSchedule = BetaSchedule.linear
    eta: float = 0.1
    epsilon: float = 0.03
    wavefront: int = 128
    headway: int = 1
    init_scale: float = 0.0
    continuous_compute: bool = False
    freeze: Freeze = Freeze.adaptive
    freeze_rule: FreezeRule = FreezeRule.prefix
    adaptive_rule: AdaptiveRule = AdaptiveRule.paper
    r_freeze: Optional[int] = None    # null: r in fixed mode, no budget in adaptive mode
    pad_id: Optional[int] = None      # null: extra headway positions get random ids
    kv_cache: KVCache = KVCache.shared
    max_steps: Optional[int] = None   # null = the sampler's own cap


SAMPLER_SCHEMAS: dict[str, type] = {
    "static": StaticSamplerConfig,
    "adaptive": AdaptiveSamplerConfig,
    "speculative": SpeculativeSamplerConfig,
    "diffusion": DiffusionSamplerConfig,
}

# Every sampler key of docs/architecture.md (the names Optuna parameters may take).
SAMPLER_KEYS: tuple[str, ...] = tuple(
    dict.fromkeys(k for s in SAMPLER_SCHEMAS.values() for k in s.__dataclass_fields__ if k != "name")
)

# ----------------------------------------------------------------------------------------------- study


@dataclass
class ParamSpace:
    """One Optuna distribution: ``int``/``float`` with ``low``/``high`` (``log``, ``step``) or ``categorical``."""

    type: ParamType = MISSING
    low: Optional[float] = None
    high: Optional[float] = None
    log: bool = False
    step: Optional[float] = None
    choices: Optional[List[Any]] = None
    values: Optional[List[Any]] = None    # the points used by ``study.algorithm=grid``


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
    # grid mode: also record the paper's baselines (static AR r=32/4/8, adaptive, speculative) once per identity
    # (recdiff/study/baselines.py); a searched study does not (its sampler would see their parameters)
    baselines: bool = True
    heartbeat_interval: int = 10          # seconds between heartbeats of a RUNNING trial
    grace_period: int = 60                # a RUNNING trial without heartbeat for this long is failed
    max_retry: int = 2                    # a trial whose worker died is re-queued at most this often
    max_duplicates: int = 32              # consecutive duplicate proposals before the space counts as exhausted


# ------------------------------------------------------------------------------------------------- run


@dataclass
class RunConfig:
    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    batch_size: Optional[int] = None      # sequences decoded side by side for accuracy (null = per-device default)
    speed_samples: int = 16               # problems timed one at a time (batch 1) for tokens_per_s
    warmup: int = 1                       # untimed generate calls before measuring
    n_traces: int = 2                     # samples whose diffusion trace is saved (stability pictures)
    timeout_s: Optional[float] = None     # per trial; the trial is FAIL when it runs longer
    threads: Optional[int] = None         # torch CPU threads (null = torch's default)
    progress: bool = True                 # tqdm bar over the samples (stderr)
    inject_fault: Optional[Fault] = None  # testing only


@dataclass
class Config:
    model: ModelConfig = MISSING
    sampler: Any = MISSING                # one of SAMPLER_SCHEMAS (chosen by the sampler/ group)
    benchmark: Any = MISSING              # options of recdiff.benchmarks.get_benchmark (+ name)
    study: StudyConfig = MISSING
    run: RunConfig = field(default_factory=RunConfig)
    worker: int = 0                       # index of an ask/tell worker (sweep it to start several)


def register() -> None:
    """Store the schemas; config files extend them through their defaults lists."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("recdiff.model_name", model_name, replace=True)
    OmegaConf.register_new_resolver("recdiff.benchmark_label", benchmark_label, replace=True)
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    cs.store(group="model", name="model_schema", node=ModelConfig)
    cs.store(group="study", name="study_schema", node=StudyConfig)
    for name, schema in SAMPLER_SCHEMAS.items():
        cs.store(group="sampler", name=f"{name}_schema", node=schema)


register()


# ------------------------------------------------------------------------------------------ one-line errors


def _did_you_mean(key: str, parent: Any) -> str:
    try:
        from omegaconf import OmegaConf

        candidates = list(OmegaConf.to_container(parent, resolve=False).keys()) if parent is not None else []
    except Exception:
        candidates = []
    close = difflib.get_close_matches(key, [str(c) for c in candidates], n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def describe_error(exc: BaseException) -> str:
    """One line for a Hydra composition / OmegaConf validation / recdiff error."""
    from hydra.errors import MissingConfigException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError

    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in chain:
        chain.append(e)
        e = e.__cause__ or e.__context__
    for e in chain:
        full_key = getattr(e, "full_key", None)
        if isinstance(e, (ConfigKeyError, ConfigAttributeError)) and full_key:
            key = str(full_key).rsplit(".", 1)[-1]
            return f"unknown config key '{full_key}'{_did_you_mean(key, getattr(e, 'parent_node', None))}"
        if isinstance(e, ValidationError):
            msg = str(e).splitlines()[0].strip()
            return f"{full_key}: {msg}" if full_key else msg
        if isinstance(e, OmegaConfBaseException) and full_key:
            return f"{full_key}: {str(e).splitlines()[0].strip()}"
        if isinstance(e, MissingConfigException):
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            options = []
            for ln in lines[1:]:
                if ln.startswith("Config search path"):
                    break
                if not ln.endswith(":") and not ln.endswith("_schema"):
                    options.append(ln)
            hint = f" (available: {', '.join(options)})" if options else ""
            return f"{lines[0] if lines else 'missing config'}{hint}"
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    # Hydra's "Could not override 'x'." alone says little; add the cause's first line.
    cause = exc.__cause__
    if cause is not None and str(cause).strip():
        text = f"{text.rstrip('.')}: {str(cause).strip().splitlines()[0]}"
    return " ".join(text.split())
