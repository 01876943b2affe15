"""Search space: Optuna distributions from ``study.space``, the parameters of a grid trial, the sampler of a search.

Parameters are named as the config keys (``r_inner``, ``beta``, ...), plus ``sampler`` and ``benchmark``.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import (BaseDistribution, CategoricalDistribution, FloatDistribution,
                                  IntDistribution)
from omegaconf import DictConfig

from recdiff.errors import RecdiffError


def distribution(p: DictConfig | dict) -> BaseDistribution:
    kind = getattr(p["type"], "value", p["type"])
    if kind == "categorical":
        if not p.get("choices"):
            raise RecdiffError("a categorical study.space entry needs choices")
        return CategoricalDistribution(list(p["choices"]))
    if p.get("low") is None or p.get("high") is None:
        raise RecdiffError(f"a {kind} study.space entry needs low and high")
    if kind == "int":
        return IntDistribution(int(p["low"]), int(p["high"]), log=bool(p.get("log")),
                               step=int(p["step"]) if p.get("step") else 1)
    return FloatDistribution(float(p["low"]), float(p["high"]), log=bool(p.get("log")),
                             step=float(p["step"]) if p.get("step") else None)


def recorded_param(name: str, value: Any, space: DictConfig) -> tuple[Any, BaseDistribution]:
    """(value, distribution) for a value that was set rather than sampled: numeric ranges widen to hold it
    (Optuna lets numeric ranges differ between trials; categorical choices must not)."""
    if name not in space:
        raise RecdiffError(f"study.space has no entry for parameter {name!r}")
    dist = distribution(space[name])
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


def grid_params(cfg: DictConfig) -> dict[str, tuple[Any, BaseDistribution]]:
    """Every sampler key of this trial, plus the sampler and benchmark names."""
    from recdiff.trial import sampler_params

    values = {"sampler": str(cfg.sampler.name), "benchmark": str(cfg.benchmark.name), **sampler_params(cfg.sampler)}
    return {k: recorded_param(k, v, cfg.study.space) for k, v in values.items()}


def search_space(cfg: DictConfig) -> dict[str, BaseDistribution]:
    space = {}
    sampler_keys = set(cfg.sampler.keys()) - {"name"}
    for name in cfg.study.search:
        if name not in sampler_keys:
            raise RecdiffError(f"study.search: {name!r} is not a setting of sampler {cfg.sampler.name!r} "
                               f"(it has {', '.join(sorted(sampler_keys))})")
        if name not in cfg.study.space:
            raise RecdiffError(f"study.search: {name!r} has no entry in study.space")
        space[name] = distribution(cfg.study.space[name])
    if not space:
        raise RecdiffError("study.mode=search needs study.search (the keys to search, e.g. [r_inner, beta])")
    return space


def make_sampler(study_cfg: DictConfig, worker: int = 0) -> optuna.samplers.BaseSampler:
    algo = getattr(study_cfg.algorithm, "value", study_cfg.algorithm)
    seed = None if study_cfg.seed is None else int(study_cfg.seed) + worker   # workers must not propose alike
    if algo == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=int(study_cfg.population_size), seed=seed)
    if algo == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if algo == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    if algo == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if algo == "grid":
        space = {}
        for name in study_cfg.search:
            p = study_cfg.space[name]
            points = p.values if p.values is not None else p.choices
            if points is None:
                raise RecdiffError(f"study.algorithm=grid needs study.space.{name}.values")
            space[name] = list(points)
        return optuna.samplers.GridSampler(space, seed=seed)
    raise RecdiffError(f"unknown study.algorithm {algo!r}")
