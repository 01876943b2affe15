"""A sampler parameter is declared once (recdiff/params.py); the sampler's SPEC, the sweep's sampler node, the default
search space and the docs' tables come from that declaration. These tests check what the derivation promises: the
generated docs are current, the sweep composes each sampler to its declared defaults, and the API and the sweep refuse
the same settings with the same line."""

from __future__ import annotations

import dataclasses

import pytest

from recdiff.errors import RecdiffError
from recdiff.params import SAMPLER_PARAMS, declarations, default_space
from recdiff.study.identity import config_hash
from recdiff.tools import sampler_docs
from tests.sweep_helpers import compose_cfg, compose_plan


def test_the_docs_tables_are_generated_from_the_declarations():
    assert sampler_docs.main(["--check"]) == 0, "run python -m recdiff.tools.sampler_docs"


# Each sampler's defaults written out by hand, as docs/samplers.md states them (the diffusion sampler's are the paper's,
# Sec. 4: r = 32, r' = 4, eps = 0.03, beta = 0, eta = 0.1, W = 128): an expectation independent of the declarations,
# so that a default changed there by mistake fails here (and a new sampler fails until its defaults are written here).
DOCUMENTED_DEFAULTS = {
    "static": {"r": 32, "init_scale": 0.0, "kv_cache": "shared"},
    "adaptive": {"r": 32, "epsilon": 0.03, "init_scale": 0.0, "exit_in_prefill": True, "kv_cache": "shared",
                 "exit_kv": "mask"},
    "speculative": {"r": 32, "r_draft": 4, "lookahead": 4, "init_scale": 0.0, "kv_cache": "shared"},
    "diffusion": {"r": 32, "r_inner": 4, "beta": 0.0, "beta_schedule": "linear", "eta": 0.1, "epsilon": 0.03,
                  "wavefront": 128, "headway": 1, "init_scale": 0.0, "continuous_compute": False,
                  "freeze": "adaptive", "freeze_rule": "prefix", "adaptive_rule": "paper", "kv_cache": "shared"},
    "loopspec": {"r": 32, "r_draft": 4, "init_scale": 0.0, "kv_cache": "per_step"},
}


@pytest.mark.parametrize("name", SAMPLER_PARAMS)
def test_a_sweep_composes_each_sampler_to_its_declared_defaults(name):
    plan = compose_plan([f"sampler={name}"])
    assert plan.sampler == SAMPLER_PARAMS[name]()
    assert plan.sampler.params() == DOCUMENTED_DEFAULTS[name]
    # every parameter has the declared search space (and one per name across samplers: default_space checks it)
    space = compose_cfg([f"sampler={name}"]).study.space
    for f in plan.sampler.declared():
        assert plan.study.space[f.name] == default_space()[f.name], f.name
        assert f.name in space


def test_every_declaration_states_its_meaning_and_a_check_that_refuses_nonsense():
    for key, p in declarations().items():
        assert p.meaning and p.check(object()).startswith("must be"), key
        assert p.check(p.default) is None, key


@pytest.mark.parametrize("name, values, message", [
    ("diffusion", {"r_inner": 0}, "diffusion sampler: r_inner=0 must be an integer in [1, 1024]"),
    ("diffusion", {"kv_cache": "per_step"}, "diffusion sampler: kv_cache='per_step' must be one of shared"),
    ("speculative", {"r": 4, "r_draft": 8}, "speculative sampler: r_draft=8 exceeds r=4"),
    ("static", {"init_scale": -1.0}, "static sampler: init_scale=-1.0 must be a number >= 0"),
])
def test_the_api_and_the_sweep_refuse_a_setting_with_the_same_line(name, values, message):
    from recdiff.samplers import check_params

    with pytest.raises(RecdiffError) as api:
        check_params(name, values)
    with pytest.raises(RecdiffError) as sweep:
        compose_plan([f"sampler={name}", *(f"sampler.{k}={v}" for k, v in values.items())])
    assert str(api.value) == str(sweep.value) == message


def test_values_set_in_python_get_the_declared_types():
    """A search's sampled values and a baseline's settings are typed as composed ones, so they hash alike."""
    p = dataclasses.replace(SAMPLER_PARAMS["diffusion"](), beta=1, beta_schedule="sqrt")
    assert p.beta == 1.0 and isinstance(p.beta, float) and p.beta_schedule.value == "sqrt"
    assert config_hash(compose_plan(["sampler.beta=1", "sampler.beta_schedule=sqrt"]).with_sampler(beta=1)) == \
        config_hash(compose_plan(["sampler.beta=1.0", "sampler.beta_schedule=sqrt"]))


@pytest.mark.parametrize("overrides", [[], ["sampler=static"], ["sweeps=table1"], ["study=search"],
                                       ["sampler.beta_schedule=sqrt", "sampler.r_freeze=8"]])
def test_the_plan_holds_the_composed_config(overrides):
    """What a trial records as its config (and hashes) is the config Hydra composed."""
    from omegaconf import OmegaConf

    cfg = compose_cfg(overrides)
    assert compose_plan(overrides).as_dict() == OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)

