"""The samplers' parameters, each declared once: type, default, accepted values, search range, paper symbol, meaning.

A parameter is a :class:`Param` (the constants below), and each sampler's dataclass (:class:`StaticParams` ...) lists
the parameters it takes; the field's annotation is its type. Everything else derives from these declarations:

- the sampler's ``SPEC`` and ``RULES``, which ``recdiff.generate`` validates (:meth:`SamplerParams.spec`);
- the sweep's structured configs ``sampler/<name>`` and the study's default search space ``study/space/default``
  (registered in Hydra's ConfigStore by ``recdiff/schema.py``; :func:`default_space`);
- the parameter tables of docs/samplers.md and docs/architecture.md (``python -m recdiff.tools.sampler_docs``);
- the analysis' axis labels (``analysis/labels.py``).

Torch-free (as ``recdiff.schema``), so the sweep's command line and the analysis import it quickly.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, List, Optional, Sequence

# omegaconf.MISSING's value, spelled out: the declarations stay OmegaConf structured configs without importing it, so
# the engine and samplers (which read them) run where only torch, numpy and safetensors are installed (a GPU box)
MISSING: Any = "???"

from recdiff.checks import (
    Check,
    Rule,
    at_most,
    boolean,
    half_open_unit,
    is_int,
    non_negative,
    non_negative_int,
    one_of,
    optional,
    positive,
    positive_int,
    recurrence,
    unit_interval,
    validate,
)
from recdiff.errors import RecdiffError


# ------------------------------------------------------------------------------------------- search space
class ParamType(str, Enum):
    int = "int"
    float = "float"
    categorical = "categorical"


@dataclass
class ParamSpace:
    """One Optuna distribution: ``int``/``float`` with ``low``/``high`` (``log``, ``step``) or ``categorical``.
    A study's ``study.space`` maps parameter names to these; :func:`default_space` derives the defaults."""

    type: ParamType = MISSING
    low: Optional[float] = None
    high: Optional[float] = None
    log: bool = False
    step: Optional[float] = None
    choices: Optional[List[Any]] = None
    values: Optional[List[Any]] = None    # the points used by ``study.algorithm=grid``

    def distribution(self) -> Any:
        """The Optuna distribution (one :class:`RecdiffError` line when the entry lacks what its type needs)."""
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        kind = ParamType(self.type).value
        if kind == "categorical":
            if not self.choices:
                raise RecdiffError("a categorical study.space entry needs choices")
            return CategoricalDistribution(list(self.choices))
        if self.low is None or self.high is None:
            raise RecdiffError(f"a {kind} study.space entry needs low and high")
        if kind == "int":
            return IntDistribution(int(self.low), int(self.high), log=bool(self.log),
                                   step=int(self.step) if self.step else 1)
        return FloatDistribution(float(self.low), float(self.high), log=bool(self.log),
                                 step=float(self.step) if self.step else None)

    def recorded(self, name: str, value: Any) -> tuple[Any, Any]:
        """(value, distribution) for a value that was set rather than sampled: numeric ranges widen to hold it
        (Optuna lets numeric ranges differ between trials; categorical choices must not)."""
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        dist = self.distribution()
        if isinstance(dist, CategoricalDistribution):
            if value not in dist.choices:
                raise RecdiffError(f"{name}={value!r} is not among study.space.{name}.choices {list(dist.choices)}")
            return value, dist
        if isinstance(dist, IntDistribution):
            if isinstance(value, bool) or not float(value).is_integer():
                raise RecdiffError(f"{name}={value!r} must be an integer (study.space.{name}.type=int)")
            value = int(value)
            low, high = min(dist.low, value), max(dist.high, value)
            if dist.log and low < 1:
                return value, IntDistribution(low, high, log=False, step=1)
            if dist.step != 1 and (value - dist.low) % dist.step:
                return value, IntDistribution(low, high, log=dist.log, step=1)
            return value, IntDistribution(low, high, log=dist.log, step=dist.step)
        value = float(value)
        low, high = min(dist.low, value), max(dist.high, value)
        if dist.log and low <= 0:
            return value, FloatDistribution(low, high)
        return value, FloatDistribution(low, high, log=dist.log)


def numeric(low: float, high: float, log: bool = False, values: Sequence[Any] | None = None) -> ParamSpace:
    """A numeric search range; its type (int or float) comes from the parameter's annotation."""
    return ParamSpace(type=MISSING, low=low, high=high, log=log, values=list(values) if values else None)


# ------------------------------------------------------------------------------------------------ choices
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
    reference = "reference"  # the authors' rule: their tokens and freezes exactly (fixtures, published runs)


class KVCache(str, Enum):
    shared = "shared"        # one K/V per layer and position (the paper's KV sharing)
    per_step = "per_step"


class ExitKV(str, Enum):
    mask = "mask"            # a position is left out at the recurrences it skipped (the authors' full cache)
    copy = "copy"            # its last recurrence's K/V stand in at the ones it skipped


# ---------------------------------------------------------------------------------------------- parameters
@dataclass(frozen=True)
class Param:
    """One parameter, shared by every sampler that takes it. Calling it gives the sampler dataclass's field; a
    sampler may narrow the accepted values (``check``) or say what the parameter means for it (``meaning``)."""

    default: Any
    check: Check
    meaning: str
    symbol: str = ""                     # the paper's symbol, "" where the paper has none
    label: str = ""                      # axis and legend label where it is not the symbol
    latex: str = ""                      # the symbol typeset (Table 1's row labels)
    space: ParamSpace | None = None      # numeric search range; a categorical one comes from the type

    def __call__(self, check: Check | None = None, meaning: str | None = None, default: Any = MISSING) -> Any:
        """The field of a sampler that takes this parameter; ``default``: the sampler's own, where it differs."""
        default = self.default if default is MISSING else default
        declared = dataclasses.replace(self, check=check or self.check, meaning=meaning or self.meaning,
                                       default=default)
        return field(default=default, metadata={"param": declared, "declaration": self})

    def plot_label(self, key: str) -> str:
        return self.label or self.symbol or key


# Param(default, accepted values, meaning, symbol=paper's, label=plot's, latex=typeset, space=search range)
R = Param(32, recurrence, "recurrences per token (static AR depth; prefill depth; fixed-freeze budget)",
          symbol="r", latex="r", space=numeric(1, 128, log=True, values=[8, 16, 32, 64]))
R_INNER = Param(4, recurrence, "inner recurrences per sampler step; more = stabler, slower",
                symbol="r′", latex="r'", space=numeric(1, 32, log=True, values=[1, 2, 4, 8]))
BETA = Param(0.0, unit_interval, "state-noise mixing; helps when r′ is small",
             symbol="β_t", latex=r"\beta_t", space=numeric(0.0, 1.0, values=[0.0, 0.1, 0.2, 0.5]))
BETA_SCHEDULE = Param(BetaSchedule.linear, one_of("constant", "dampened", "linear", "sqrt"),
                      "how β_t falls with the steps at a position (linear: the paper's choice)",
                      label="β_t schedule")
ETA = Param(0.1, half_open_unit, "embedding momentum; small but non-zero is best",
            symbol="η", latex=r"\eta", space=numeric(0.0, 0.9, values=[0.0, 0.1, 0.3, 0.5]))
EPSILON = Param(0.03, positive, "freeze a position once its relative latent change is below this",
                symbol="ε", latex=r"\varepsilon", space=numeric(0.001, 0.3, log=True, values=[0.01, 0.03, 0.1]))
WAVEFRONT = Param(128, positive_int, "most positions refined at once (bounds memory); 64-128 best on A100",
                  symbol="W", label="max wavefront", latex="W",
                  space=numeric(1, 512, log=True, values=[16, 32, 64, 128, 256]))
HEADWAY = Param(1, positive_int, "positions appended per step",
                symbol="headway", latex=r"\text{headway}", space=numeric(1, 8, values=[1, 2, 4]))
INIT_SCALE = Param(0.0, non_negative, "scale of new random states (0 = zeros, deterministic)",
                   symbol="α", latex=r"\alpha", space=numeric(0.0, 2.0, values=[0.0, 0.5, 1.0]))
CONTINUOUS_COMPUTE = Param(False, boolean, "initialise a new state from the state one position to the left",
                           label="continuous compute")
FREEZE = Param(Freeze.adaptive, one_of("adaptive", "fixed"),
               "adaptive (Algorithm 2: once the latent change is below ε) or fixed (Algorithm 1: after r_freeze "
               "recurrences)")
FREEZE_RULE = Param(FreezeRule.prefix, one_of("prefix", "last"),
                    "prefix: every compared position up to k* below ε (eq. conv); last: the last one below ε")
ADAPTIVE_RULE = Param(AdaptiveRule.paper, one_of("paper", "reference"),
                      "paper (recdiff) or reference (the authors' rule, token for token; docs/parity.md)")
R_FREEZE = Param(None, optional(recurrence),
                 "recurrence budget per position: null = r in fixed mode, none in adaptive mode",
                 space=numeric(1, 4096, log=True))
PAD_ID = Param(None, optional(non_negative_int),
               "token for extra headway positions (null = random ids from the vocabulary)",
               space=numeric(0, 1000000))
KV_CACHE = Param(KVCache.shared, one_of("shared", "per_step"),
                 "shared: one K/V per layer and position (the paper's KV sharing); per_step: one per recurrence",
                 label="KV cache")
MAX_STEPS = Param(None, optional(positive_int),
                  "hard cap on sampler steps (null: 4·max_new_tokens·⌈r/r′⌉, four times fixed mode's steps)",
                  label="max steps", space=numeric(1, 65536, log=True))
EXIT_KV = Param(ExitKV.mask, one_of("mask", "copy"),
                "per_step: what later tokens see of an exited token at the recurrences it skipped: nothing (mask, "
                "the authors' full cache) or its last recurrence's K/V (copy)", label="exit K/V")
EXIT_IN_PREFILL = Param(True, boolean,
                        "the prompt's recurrence may exit early too (as the authors' sampler); false prefills at r")
R_DRAFT = Param(4, recurrence, "recurrences per drafted token",
                label="draft depth", latex=r"r_{\text{draft}}", space=numeric(1, 64, log=True))
LOOKAHEAD = Param(4, positive_int, "tokens drafted per round, verified in one pass at r",
                  label="lookahead", latex=r"\text{lookahead}", space=numeric(1, 32, log=True))
EXIT_THRESHOLD = Param(None, optional(unit_interval),
                       "exit gate (Ouro): a token's exit is the first recurrence whose cumulative exit probability "
                       "reaches this; null: no gate",
                       symbol="q", latex="q", space=numeric(0.05, 1.0, values=[0.5, 0.7, 0.9, 1.0]))
R_DRAFT2 = Param(None, optional(recurrence),
                 "second early readout's depth K·X (a multiple of r_draft below r); null: one early readout",
                 label="second readout depth", latex=r"r_{\text{draft2}}", space=numeric(2, 64, log=True))


# ------------------------------------------------------------------------------------------------ samplers
def _plain(v: Any) -> Any:
    return v.value if isinstance(v, Enum) else v


@dataclass
class SamplerParams:
    """A sampler's settings: the sweep's ``sampler`` node and the keyword arguments of ``recdiff.generate``."""

    name: str = MISSING
    rules: ClassVar[tuple[Rule, ...]] = ()          # combinations the sampler refuses (checked after each value)

    def __post_init__(self) -> None:
        own = type(self).__dataclass_fields__["name"].default
        if self.name != own:   # the sampler is chosen by its node (sampler=<name>), which fixes the parameters
            raise RecdiffError(f"sampler.name={self.name!r} in the {own} sampler's settings: choose a sampler with "
                               f"sampler={self.name}")
        # values set in Python (a search's sampled ones, a baseline's) get the types OmegaConf gives composed ones
        for f in self.declared():
            v, kind = getattr(self, f.name), _base_type(type(self), f.name)
            if isinstance(kind, type) and issubclass(kind, Enum) and v in {e.value for e in kind}:
                setattr(self, f.name, kind(v))
            elif kind is float and is_int(v):
                setattr(self, f.name, float(v))

    @classmethod
    def declared(cls) -> list[dataclasses.Field]:
        """The parameter fields (``name`` is the sampler's, not a parameter)."""
        return [f for f in dataclasses.fields(cls) if "param" in f.metadata]

    @classmethod
    def spec(cls) -> dict[str, tuple[Any, Check]]:
        """name → (default, check): what ``recdiff.generate`` accepts (the sampler module's ``SPEC``)."""
        return {f.name: (_plain(f.default), f.metadata["param"].check) for f in cls.declared()}

    def params(self) -> dict[str, Any]:
        """The keyword arguments for ``recdiff.generate``: every set value (None = the sampler's own choice)."""
        return {f.name: _plain(getattr(self, f.name)) for f in self.declared() if getattr(self, f.name) is not None}

    def values(self) -> dict[str, Any]:
        """Every parameter's value, plain (enums as their strings, None where unset)."""
        return {f.name: _plain(getattr(self, f.name)) for f in self.declared()}

    @classmethod
    def checked(cls, values: dict[str, Any]) -> SamplerParams:
        """The one way in for settings given as keyword arguments (``recdiff.generate``, lm-eval's model_args):
        defaults filled in, unknown names, bad values and bad combinations refused in one :class:`RecdiffError`
        line, and the typed parameters the sampler runs with returned."""
        name = cls.__dataclass_fields__["name"].default
        return cls(**validate(name, values, cls.spec(), cls.rules))

    def complaint(self) -> str | None:
        """Why this combination cannot run (None when it can): the sampler's own rules, as ``recdiff.generate``
        applies them, without a model."""
        try:
            validate(self.name, self.params(), self.spec(), self.rules)
        except RecdiffError as err:
            return str(err)
        return None


@functools.cache
def _base_type(cls: type, name: str) -> Any:
    """The annotation of field ``name`` without ``Optional`` (annotations are text here: ``from __future__``)."""
    hint = typing.get_type_hints(cls)[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if typing.get_origin(hint) is typing.Union and len(args) == 1 else hint


@dataclass
class StaticParams(SamplerParams):
    """Static autoregressive decoding: every token gets exactly r recurrences."""

    name: str = "static"
    r: int = R()
    init_scale: float = INIT_SCALE()
    kv_cache: KVCache = KV_CACHE()
    exit_threshold: Optional[float] = EXIT_THRESHOLD(
        meaning="exit gate (Ouro): every recurrence is computed and a token is read out at the first whose "
                "cumulative exit probability reaches this (the reference's exit_threshold); null: at r")


@dataclass
class AdaptiveParams(SamplerParams):
    """Adaptive-compute AR: each token exits its recurrence once the latent change falls below ε (the original
    work's sampler)."""

    name: str = "adaptive"
    r: int = R(meaning="upper bound of recurrences per token")
    epsilon: float = EPSILON(meaning="exit a token's recurrence once its relative latent change is below this")
    init_scale: float = INIT_SCALE()
    exit_in_prefill: bool = EXIT_IN_PREFILL()
    kv_cache: KVCache = KV_CACHE()
    exit_kv: ExitKV = EXIT_KV()
    exit_threshold: Optional[float] = EXIT_THRESHOLD(
        meaning="exit gate (Ouro): a token stops at the first recurrence whose cumulative exit probability reaches "
                "this, in place of ε (its later recurrences are not computed); null: ε decides")


@dataclass
class SpeculativeParams(SamplerParams):
    """Self-speculative decoding: draft `lookahead` tokens at depth r_draft, verify them at depth r."""

    name: str = "speculative"
    r: int = R(meaning="recurrences of the verifying pass")
    r_draft: int = R_DRAFT()
    lookahead: int = LOOKAHEAD()
    init_scale: float = INIT_SCALE()
    kv_cache: KVCache = KV_CACHE()
    rules: ClassVar[tuple[Rule, ...]] = (at_most("r_draft", "r"),)


def readout_depths(p: dict[str, Any]) -> str | None:
    """`r_draft` divides `r` and is below it; `r_draft2`, if set, a multiple of `r_draft` between it and `r`"""
    r, k, k2 = p.get("r"), p.get("r_draft"), p.get("r_draft2")
    if r is None or k is None:
        return None
    if k >= r or r % k:
        return f"r_draft={k} must divide r={r} and be below it (every readout falls at the end of a cycle of r_draft)"
    if k2 is not None and (k2 % k or not k < k2 < r):
        return f"r_draft2={k2} must be a multiple of r_draft={k} above it and below r={r}"
    return None


@dataclass
class LoopSpecParams(SamplerParams):
    """Pipelined self-speculative decoding (LoopSpec): every token is read out early at depth r_draft (and at
    r_draft2), the readout's token starts its own recurrence at once in a new lane while its parent runs on to r,
    and a token is committed only by the full-depth readout, so that greedy output is static AR's at r with per-step
    KV caches, and sampled output has its distribution (speculative rejection sampling)."""

    name: str = "loopspec"
    r: int = R(meaning="full depth S: recurrences of the readout that commits each token")
    r_draft: int = R_DRAFT(meaning="first early readout's depth K (a cycle: K recurrences of every live lane)")
    r_draft2: Optional[int] = R_DRAFT2()
    init_scale: float = INIT_SCALE()
    kv_cache: KVCache = KV_CACHE(check=one_of("per_step"), default=KVCache.per_step,
                                 meaning="`per_step` only: every depth its own K/V timeline")
    preset: Optional[Provenance] = None   # set by a tuned preset (sampler=tuned/<name>): where it was tuned
    rules: ClassVar[tuple[Rule, ...]] = (readout_depths,)


@dataclass
class Provenance:
    """Where a tuned preset (``conf/sampler/tuned/<name>.yaml``, written by ``python -m recdiff.tune``) was tuned, how
    it was timed and what it was confirmed against. Not a setting: no sampler reads it, and a configuration's hash
    leaves it out. A part an older preset does not state is None."""

    name: str = ""
    device: str = ""                      # "cpu (<model name>)" or "cuda (<GPU name>)" (recdiff.device.Device.label)
    torch: str = ""
    version: Optional[str] = None         # recdiff's package version
    commit: Optional[str] = None          # git commit of the checkout it ran from, "-dirty" with changes; null: none
    model: str = ""                       # path or hub id
    weights: Optional[str] = None         # digest of the weight files (recdiff.digest.weights_digest)
    dtype: Optional[str] = None
    timing_batch: Optional[int] = None    # run.timing_batch: sequences per timed call, the batch size it answers for
    speed_samples: Optional[int] = None   # run.speed_samples of the search: timed calls per round
    repeats: Optional[int] = None         # run.repeats of the search: rounds of paired timing
    timing_threads: Optional[int] = None  # run.timing_threads: torch threads while timing
    benchmark: str = ""                   # the slice searched
    trials_complete: Optional[int] = None  # search trials COMPLETE ...
    trials_total: Optional[int] = None    # ... of the counted ones (FAIL and PRUNED included)
    held_out: str = ""                    # the slice the choice was confirmed on
    held_out_speed_samples: Optional[int] = None   # timed calls per round on it (problems at batch 1)
    held_out_repeats: Optional[int] = None         # rounds on it
    study: str = ""
    date: str = ""
    result: str = ""                      # the confirmed speed-up and accuracy, or why the paper's defaults were kept
    batch_size: Optional[int] = None      # what presets before timing_batch called it: read into timing_batch

    def __post_init__(self) -> None:
        if self.batch_size is not None:
            if self.timing_batch is None:
                self.timing_batch = self.batch_size
            self.batch_size = None


@dataclass
class DiffusionParams(SamplerParams):
    """The diffusion-forcing sampler (Algorithm 2 with adaptive freezing; Algorithm 1 with `freeze=fixed`).
    Defaults are the paper's (Sec. 4): ε=0.03, β=0, η=0.1, r′=4, maximum wavefront 128."""

    name: str = "diffusion"
    r: int = R()
    r_inner: int = R_INNER()
    beta: float = BETA()
    beta_schedule: BetaSchedule = BETA_SCHEDULE()
    eta: float = ETA()
    epsilon: float = EPSILON()
    wavefront: int = WAVEFRONT()
    headway: int = HEADWAY()
    init_scale: float = INIT_SCALE()
    continuous_compute: bool = CONTINUOUS_COMPUTE()
    freeze: Freeze = FREEZE()
    freeze_rule: FreezeRule = FREEZE_RULE()
    adaptive_rule: AdaptiveRule = ADAPTIVE_RULE()
    r_freeze: Optional[int] = R_FREEZE()
    pad_id: Optional[int] = PAD_ID()
    kv_cache: KVCache = KV_CACHE(check=one_of("shared"), meaning="`shared` only")
    max_steps: Optional[int] = MAX_STEPS()
    preset: Optional[Provenance] = None   # set by a tuned preset (sampler=tuned/<name>): where it was tuned
    rules: ClassVar[tuple[Rule, ...]] = (at_most("r_inner", "r"), at_most("headway", "wavefront"))


SAMPLER_PARAMS: dict[str, type[SamplerParams]] = {
    "static": StaticParams, "adaptive": AdaptiveParams, "speculative": SpeculativeParams, "diffusion": DiffusionParams,
    "loopspec": LoopSpecParams,
}


def parse_sampler(text: str) -> SamplerParams:
    """A sampler and its settings written as one line, ``"<sampler> <setting>=<value> ..."`` (``"static r=32"``,
    ``"diffusion r_inner=8 epsilon=0.01"``; values read as YAML), every setting not given at the sampler's default.
    A mistake is one :class:`RecdiffError` line."""
    import yaml

    name, *pairs = str(text).split() or [""]
    if name not in SAMPLER_PARAMS:
        raise RecdiffError(f"{text!r} must start with a sampler ({', '.join(SAMPLER_PARAMS)})")
    cls = SAMPLER_PARAMS[name]
    known = [f.name for f in cls.declared()]
    settings: dict[str, Any] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or key not in known:
            raise RecdiffError(f"{pair!r} is not <setting>=<value> of the {name} sampler (it has {', '.join(known)})")
        settings[key] = yaml.safe_load(value) if value else None
    params = cls(**settings)
    complaint = params.complaint()
    if complaint:
        raise RecdiffError(complaint)
    return params


def sampler_text(params: SamplerParams) -> str:
    """The one-line form :func:`parse_sampler` reads: the sampler and the settings that differ from its defaults (the
    static sampler's depth ``r`` always), in declaration order."""
    shown = [f"{f.name}={_plain(getattr(params, f.name))}" for f in params.declared()
             if getattr(params, f.name) != f.default or (params.name == "static" and f.name == "r")]
    text = " ".join([params.name, *shown])
    return text.replace("=None", "=null").replace("=True", "=true").replace("=False", "=false")


def declarations() -> dict[str, Param]:
    """Every parameter by key, as declared once (before a sampler narrows it); the diffusion sampler's first."""
    return {f.name: f.metadata["declaration"] for cls in reversed(SAMPLER_PARAMS.values()) for f in cls.declared()}


def space_of(cls: type[SamplerParams], f: dataclasses.Field) -> ParamSpace:
    """The search space of one parameter: the declared numeric range typed by the annotation, or the annotation's
    choices (an enum's values; false, true)."""
    declared, kind = f.metadata["param"], _base_type(cls, f.name)
    if isinstance(kind, type) and issubclass(kind, Enum):
        return ParamSpace(type=ParamType.categorical, choices=[e.value for e in kind])
    if kind is bool:
        return ParamSpace(type=ParamType.categorical, choices=[False, True])
    if declared.space is None or kind not in (int, float):
        raise TypeError(f"{cls.__name__}.{f.name}: a {kind} parameter needs a numeric space")
    return dataclasses.replace(declared.space, type=ParamType(kind.__name__))


def default_space() -> dict[str, ParamSpace]:
    """``study/space/default``: every sampler parameter's search space. A parameter several samplers take has one
    space (Optuna requires one distribution per name within a study); a conflict fails here, at import."""
    out: dict[str, ParamSpace] = {}
    for cls in SAMPLER_PARAMS.values():
        for f in cls.declared():
            space = space_of(cls, f)
            if out.setdefault(f.name, space) != space:
                raise TypeError(f"{cls.__name__}.{f.name}: search space {space} differs from {out[f.name]}")
    return out
