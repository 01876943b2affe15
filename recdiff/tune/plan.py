"""The tune's plan: the sweep's typed plan, composed with Hydra's compose API over ``conf/`` as ``sweep.py`` composes
it, and the tune's own options (``tune.*``, :class:`TuneOptions`), every setting checked before anything loads.

The search covers two samplers: the diffusion sampler's knobs (``study.search``, over the sampler node given) and
LoopSpec's (``tune.loopspec``: ``r_draft``, ``r_draft2``) at the same ``r``. A *setting* is a search trial's
parameters: its sampler's name under ``sampler`` (the Optuna parameter of that name) and that sampler's searched
knobs (:meth:`TunePlan.space`, :meth:`TunePlan.sampler_of`).

From it derive the three studies of one tune (all in ``study.storage``): the search (``study.name``, by default
``tune-<model>-<benchmark>-<device>-b<batch>``, the device's slug such as ``cpu-amd-epyc`` or ``cuda-h100``), the
reference on the searched slice (``<name>-reference``) and the held-out slice (``<name>-holdout``), where the choice is
confirmed beside the paper's defaults and the reference. A preset file that exists already is refused here, before
the search spends any time, unless ``tune.overwrite=true``.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional

from recdiff.device import Device, describe
from recdiff.errors import RecdiffError
from recdiff.params import DiffusionParams, LoopSpecParams, SamplerParams
from recdiff.presets import PRESET_DIR, refuse_overwrite
from recdiff.schema import Algorithm, Config, Mode

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
HOLDOUT_SPEED_SAMPLES = 8   # the held-out slice's timed problems at least (an interval by problem needs several) ...
HOLDOUT_REPEATS = 5         # ... and rounds at least
LOOPSPEC_KNOBS = ("r_draft", "r_draft2")   # LoopSpec's knobs the tune may search (its readout depths)


@dataclass
class TuneOptions:
    """``tune.*`` on the command line."""

    time_budget_s: Optional[float] = None    # wall time of the whole command (search, confirmation, table); null: none
    patience: Optional[int] = 12             # stop after this many trials run without a faster feasible setting
    trial_timeout_x: float = 1.5             # a search trial is cut (FAIL timeout) after this many reference trials
    holdout_limit: Optional[int] = None      # problems of the held-out slice (null: benchmark.limit)
    holdout_offset: Optional[int] = None     # its first problem (null: right after the searched slice)
    holdout_speed_samples: Optional[int] = None   # timed calls per round there (null: max(8, run.speed_samples))
    holdout_repeats: Optional[int] = None    # rounds of paired timing there (null: max(5, run.repeats))
    runners_up: int = 3                      # rows of runners-up in the closing table
    name: Optional[str] = None               # the preset's name (null: <model>-<device>-b<batch>)
    preset_dir: Optional[str] = None         # where the preset is written (null: conf/sampler/tuned)
    overwrite: bool = False                  # replace a preset file of the same name (else refused, exit 2)
    output_dir: str = "outputs/tune"         # each trial's files, under <output_dir>/<study>/
    # LoopSpec's knobs searched beside the diffusion sampler's, at the same r; []: the diffusion sampler alone
    loopspec: List[str] = field(default_factory=lambda: list(LOOPSPEC_KNOBS))

    def __post_init__(self) -> None:
        unknown = [k for k in self.loopspec if k not in LOOPSPEC_KNOBS]
        if unknown:
            raise RecdiffError(f"tune.loopspec: {unknown[0]!r} is not a LoopSpec knob the tune searches "
                               f"({', '.join(LOOPSPEC_KNOBS)}; [] searches the diffusion sampler alone)")
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            raise RecdiffError(f"tune.time_budget_s={self.time_budget_s!r} must be > 0 (or null: no time budget)")
        if self.patience is not None and self.patience < 1:
            raise RecdiffError(f"tune.patience={self.patience!r} must be >= 1 (or null: no patience)")
        if not self.trial_timeout_x > 0:
            raise RecdiffError(f"tune.trial_timeout_x={self.trial_timeout_x!r} must be > 0 (times the reference's "
                               "trial)")
        for key in ("holdout_limit", "holdout_offset"):
            v = getattr(self, key)
            if v is not None and v < (1 if key == "holdout_limit" else 0):
                raise RecdiffError(f"tune.{key}={v!r} must be >= {1 if key == 'holdout_limit' else 0}")
        if self.holdout_repeats is not None and self.holdout_repeats < 2:
            raise RecdiffError(f"tune.holdout_repeats={self.holdout_repeats!r} must be >= 2 (an interval needs two)")
        if self.holdout_speed_samples is not None and self.holdout_speed_samples < 2:
            raise RecdiffError(f"tune.holdout_speed_samples={self.holdout_speed_samples!r} must be >= 2 (the held-out "
                               "interval resamples the timed problems)")
        if self.runners_up < 0:
            raise RecdiffError(f"tune.runners_up={self.runners_up!r} must be >= 0")
        if self.name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", self.name):
            raise RecdiffError(f"tune.name={self.name!r}: a preset's name is letters, digits, '_', '.', '-'")


@dataclass
class _Root:                 # so that a mistake reads tune.<key>
    tune: TuneOptions = field(default_factory=TuneOptions)


@dataclass
class TunePlan:
    """What one tune runs: the search's plan (``study.mode=search`` over the diffusion sampler's knobs, and LoopSpec's
    beside them) and the plans derived from it."""

    search: Config
    options: TuneOptions
    device: str               # resolved: cpu, cuda, cuda:N
    command: str              # the overrides as given (the preset's provenance)

    @property
    def batch(self) -> int:
        """The batch size of the question: sequences per timed call."""
        return int(self.search.run.timing_batch)

    def grid(self, sampler: SamplerParams, suffix: str, benchmark: dict[str, Any] | None = None,
             **run: Any) -> Config:
        """A grid plan into the study ``<name>-<suffix>``: the search's settings with another sampler (and slice, and
        ``run`` settings)."""
        plan = self.search
        study = dataclasses.replace(plan.study, mode=Mode.grid, name=f"{plan.study.name}-{suffix}", baselines=False)
        return dataclasses.replace(plan, sampler=sampler, study=study, run=dataclasses.replace(plan.run, **run),
                                   benchmark=benchmark if benchmark is not None else plan.benchmark)

    def reference(self) -> Config:
        """The reference (``run.reference``, static AR at r=32) on the searched slice: the accuracy to keep."""
        return self.grid(self.search.run.reference_sampler(), "reference")

    def holdout_benchmark(self) -> dict[str, Any]:
        b = dict(self.search.benchmark)
        limit = self.options.holdout_limit or b.get("limit")
        offset = self.options.holdout_offset
        if offset is None:
            offset = int(b.get("offset") or 0) + int(b["limit"])
        return {**b, "limit": limit, "offset": offset}

    def holdout(self, sampler: SamplerParams) -> Config:
        """``sampler`` on the held-out slice, ``tune.holdout_speed_samples`` timed calls (problems at batch 1) in
        ``tune.holdout_repeats`` rounds. The reference is timed against itself (speed-up 1 by definition) in the fewest
        rounds: its accuracy counts."""
        if sampler == self.search.run.reference_sampler():
            return self.grid(sampler, "holdout", self.holdout_benchmark(), speed_samples=1, repeats=2)
        return self.grid(sampler, "holdout", self.holdout_benchmark(), speed_samples=self.holdout_speed_samples,
                         repeats=self.holdout_repeats)

    @property
    def holdout_speed_samples(self) -> int:
        return self.options.holdout_speed_samples or max(HOLDOUT_SPEED_SAMPLES, self.search.run.speed_samples)

    @property
    def holdout_repeats(self) -> int:
        return self.options.holdout_repeats or max(HOLDOUT_REPEATS, self.search.run.repeats)

    def hardware(self) -> Device:
        """The device the tune measures on, with its name (``recdiff.device``)."""
        return describe(self.device)

    def defaults(self) -> DiffusionParams:
        """The paper's defaults of the searched knobs, with the plan's other settings."""
        searched = set(self.search.study.search)
        paper = {f.name: f.default for f in DiffusionParams.declared() if f.name in searched}
        return dataclasses.replace(self.search.sampler, **paper, preset=None)

    def paper(self) -> dict[str, Any]:
        """The paper's defaults of the searched knobs, as a setting (a searched trial's parameters)."""
        return self.setting(self.defaults())

    # ---- the two samplers of the search
    def samplers(self) -> list[str]:
        """The samplers searched: the diffusion sampler, and LoopSpec unless ``tune.loopspec=[]``."""
        return ["diffusion", "loopspec"] if self.options.loopspec else ["diffusion"]

    def searched(self, sampler: str) -> list[str]:
        """A sampler's searched knobs."""
        return list(self.search.study.search) if sampler == "diffusion" else list(self.options.loopspec)

    def loopspec(self) -> LoopSpecParams:
        """LoopSpec at the study's r, its knobs at their defaults (r_draft = 4; where 4 does not divide r, the readout
        depth nearest it)."""
        r = self.search.sampler.r
        r_draft = LoopSpecParams().r_draft
        depths = self.ladders("loopspec").get("r_draft") or readout_depths(r, 1)
        if r_draft not in depths and depths:
            r_draft = min(depths, key=lambda d: (abs(d - r_draft), d))
        return LoopSpecParams(r=r, r_draft=r_draft)

    def starts(self) -> list[dict[str, Any]]:
        """Each searched sampler's defaults as a setting, the paper's first: where the search starts, and what the
        choice counts knobs changed from (:func:`recdiff.tune.choice.changed`)."""
        return [self.paper(), *([self.setting(self.loopspec())] if self.options.loopspec else [])]

    def setting(self, sampler: SamplerParams) -> dict[str, Any]:
        """A sampler's settings as a setting: its name and its searched knobs (``None`` where unset)."""
        values = sampler.params()
        return {"sampler": sampler.name, **{k: values.get(k) for k in self.searched(sampler.name)}}

    def ladders(self, sampler: str) -> dict[str, list[Any]]:
        """The values each searched knob of ``sampler`` steps through in the design's climb, in order: a diffusion
        knob's declared ``study.space.<knob>.values``; LoopSpec's readout depths at the study's r within their
        ``study.space`` ranges (:func:`readout_depths`; ``r_draft2`` also null: one early readout)."""
        space = self.search.study.space
        if sampler == "diffusion":
            return {k: sorted(space[k].values) for k in self.search.study.search if space[k].values}
        r, out = self.search.sampler.r, {}
        for key in self.options.loopspec:
            low, high = space[key].low, space[key].high
            depths = [d for d in readout_depths(r, 1 if key == "r_draft" else 2)
                      if (low is None or d >= low) and (high is None or d <= high)]
            out[key] = depths if key == "r_draft" else [None, *depths]
        return out

    def space(self) -> dict[str, dict[str, Any]]:
        """The Optuna distributions of each sampler's searched knobs: the diffusion sampler's ``study.search`` over
        ``study.space``; LoopSpec's readout depths as categorical choices (:meth:`ladders`: a pair that breaks its
        rule is PRUNED at once, as any invalid combination)."""
        from optuna.distributions import CategoricalDistribution

        out = {"diffusion": self.search.search_space()}
        if self.options.loopspec:
            out["loopspec"] = {k: CategoricalDistribution(v) for k, v in self.ladders("loopspec").items()}
        return out

    def sampler_of(self, setting: dict[str, Any]) -> SamplerParams:
        """A setting's sampler settings: the diffusion sampler's node given with the setting's knobs, or LoopSpec at
        the study's r with them."""
        knobs = {k: v for k, v in setting.items() if k != "sampler"}
        if setting.get("sampler", "diffusion") == "diffusion":
            return dataclasses.replace(self.search.sampler, **knobs)
        return dataclasses.replace(self.loopspec(), **knobs)

    def trial_plan(self, setting: dict[str, Any]) -> Config:
        """The plan of one search trial: the search's, with the setting's sampler and that sampler's searched keys."""
        sampler = self.sampler_of(setting)
        study = dataclasses.replace(self.search.study, search=self.searched(sampler.name))
        return dataclasses.replace(self.search, sampler=sampler, study=study)

    def preset_name(self) -> str:
        return self.options.name or f"{self.search.model.name}-{describe(self.device).slug()}-b{self.batch}"

    def preset_path(self) -> Path:
        return Path(self.options.preset_dir or PRESET_DIR) / f"{self.preset_name()}.yaml"

    def output_dir(self) -> Path:
        return Path(self.options.output_dir) / self.search.study.name


def readout_depths(r: int, low: int) -> list[int]:
    """The depths from ``low`` below ``r`` that divide it: where a LoopSpec readout may fall (``r_draft`` must divide
    r; ``r_draft2``, a multiple of ``r_draft`` above it, is taken among them too)."""
    return [d for d in range(low, r) if r % d == 0]


def split_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    """(Hydra overrides, ``tune.*`` ones)."""
    tune = [a for a in argv if a.startswith("tune.")]
    return [a for a in argv if not a.startswith("tune.")], tune


def parse_options(overrides: list[str]) -> TuneOptions:
    """``tune.key=value`` overrides over :class:`TuneOptions` (typos and wrong types fail in one line)."""
    from omegaconf import OmegaConf

    from recdiff.errors import describe_error

    try:
        cfg = OmegaConf.merge(OmegaConf.structured(_Root), OmegaConf.from_dotlist(overrides))
        return OmegaConf.to_object(cfg).tune
    except RecdiffError:
        raise
    except Exception as exc:  # noqa: BLE001 — OmegaConf's errors, one line
        raise RecdiffError(describe_error(exc)) from None


def _given(overrides: list[str], key: str) -> bool:
    return any(o.lstrip("+~").split("=", 1)[0] == key for o in overrides)


def compose(argv: list[str]) -> TunePlan:
    """The tune's plan from its command line: Hydra overrides as for ``sweep.py`` (``study=tune`` unless another
    study is named), ``tune.*`` options. One :class:`RecdiffError` line for any mistake."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf, open_dict

    from recdiff.schema import benchmark_label, make_plan

    overrides, tune = split_overrides(argv)
    options = parse_options(tune)
    defaults = [o for o, key in (("study=tune", "study"), ("run.progress=false", "run.progress"))
                if not _given(overrides, key)]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=[*defaults, *overrides])
    if cfg.sampler.name != "diffusion":
        raise RecdiffError(f"sampler={cfg.sampler.name}: the tune starts from the diffusion sampler's node "
                           "(sampler=diffusion, or a diffusion preset sampler=tuned/<name>) and searches LoopSpec's "
                           "knobs beside it (tune.loopspec)")
    # torch loads only now (the device decides the batch): a typo above is reported without it
    from recdiff.checkpoint import resolve_device
    from recdiff.samplers import default_batch_size

    device = resolve_device(str(cfg.model.device))
    with open_dict(cfg):
        batch = cfg.run.batch_size or default_batch_size(device)
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:  # named as the user gave it
            raise RecdiffError(f"run.batch_size={batch} must be an integer >= 1 (the batch size the tune answers for)")
        cfg.run.timing_batch = batch       # the speed of the question: batch-1 tokens/s, or a batch's throughput
        # accuracy does not depend on the batch (docs/speed.md): the accuracy pass decodes side by side regardless
        cfg.run.batch_size = max(batch, default_batch_size(device))
        cfg.run.timeout_s = None           # a trial's limit is the tune's (tune.trial_timeout_x, the time left)
        cfg.sampler.preset = None          # a preset to start from is only its settings
        if OmegaConf.is_missing(cfg.study, "name"):
            label = benchmark_label(cfg.benchmark)
            cfg.study.name = f"tune-{cfg.model.name}-{label}-{describe(device).slug()}-b{batch}"
    plan = make_plan(cfg)
    if plan.study.mode != Mode.search:
        raise RecdiffError(f"study.mode={plan.study.mode.value}: the tune is a search (study=tune)")
    if plan.benchmark.get("limit") is None:
        raise RecdiffError("benchmark.limit=null: the tune needs a limited slice, and a held-out one after it")
    tp = TunePlan(search=plan, options=options, device=device, command=shlex.join(argv))
    if options.loopspec:
        if plan.study.algorithm == Algorithm.grid:
            raise RecdiffError("study.algorithm=grid: a grid holds one sampler's knobs; with it, tune.loopspec=[] "
                               "searches the diffusion sampler alone")
        if not tp.ladders("loopspec").get("r_draft", [1]):
            raise RecdiffError(f"sampler.r={plan.sampler.r}: LoopSpec's r_draft must divide r below it within "
                               "study.space.r_draft; tune.loopspec=[] searches the diffusion sampler alone")
    searched, held = plan.benchmark, tp.holdout_benchmark()
    start, end = int(searched.get("offset") or 0), int(searched.get("offset") or 0) + int(searched["limit"])
    if held["offset"] < end and start < held["offset"] + held["limit"]:
        raise RecdiffError(f"tune.holdout_offset={held['offset']}: the held-out slice overlaps the searched one "
                           f"(benchmark.offset={start}, benchmark.limit={searched['limit']})")
    if tp.batch == 1 and held["limit"] < 2:
        raise RecdiffError(f"tune.holdout_limit={held['limit']}: the held-out interval resamples the timed problems, "
                           "so it needs at least two")
    if not options.overwrite and tp.preset_path().exists():   # before the search spends any time
        raise refuse_overwrite(tp.preset_path())
    return tp
