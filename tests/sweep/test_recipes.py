"""Every combination a grid recipe of sweeps/ sweeps is one its sampler accepts: a grid is a product of the swept
values, and a combination the sampler's rules refuse would only be recorded PRUNED (``sweeps/loopspec.yaml`` pairs
its readout depths so that none is)."""

from __future__ import annotations

import functools
import itertools

import pytest
import yaml

from recdiff.tools.paper import SWEEPS, Recipe
from tests.sweep_helpers import compose_plan

# recipes by name; each is composed (about 0.4 s) by the test that needs it, not while every worker collects
NAMES = sorted(p.stem for p in SWEEPS.glob("*.yaml"))


@functools.cache
def recipe_named(name: str) -> Recipe:
    return Recipe.load(SWEEPS / f"{name}.yaml")


@pytest.mark.parametrize("name", NAMES)
def test_every_swept_combination_passes_the_samplers_rules(name):
    recipe = recipe_named(name)
    if recipe.search:   # an ask/tell recipe: no grid, its sampler checks each proposal
        assert not recipe.params, name
        return
    plan = compose_plan([f"sweeps={recipe.name}", "model=embedded", "benchmark=compose"])
    keys = [k for k in recipe.params if k.startswith("sampler.")]
    for values in itertools.product(*(recipe.params[k] for k in keys)):
        settings = {k.split(".", 1)[1]: yaml.safe_load(v) for k, v in zip(keys, values)}
        assert plan.with_sampler(**settings).sampler.complaint() is None, (recipe.name, settings)


def test_the_loopspec_recipe_sweeps_both_readout_depths_at_full_depth_32():
    recipe = recipe_named("loopspec")
    plan = compose_plan(["sweeps=loopspec", "model=embedded", "benchmark=compose"])
    assert recipe.sampler == plan.sampler.name == "loopspec" and plan.sampler.r == 32
    assert recipe.params == {"sampler.r_draft": ["1", "2", "4", "8"], "sampler.r_draft2": ["null", "16"]}
