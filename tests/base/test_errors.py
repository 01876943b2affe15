"""Every bad input gets one clear line, not a traceback from deep inside."""

from __future__ import annotations

import json
import shutil

import pytest

from recdiff import RecdiffError, generate, load_model, warm_up
from tests.conftest import RAVEN_TINY, need_fixtures


@pytest.fixture()
def model(load_fixture_model):
    return load_fixture_model(RAVEN_TINY)


def _copy(tmp_path):
    d = tmp_path / "ckpt"
    shutil.copytree(need_fixtures(), d,
                    ignore=shutil.ignore_patterns("perturbed", "generate*", "forward*", "diffusion*"))
    return d


def test_missing_folder(tmp_path):
    with pytest.raises(RecdiffError, match="does not exist"):
        load_model(tmp_path / "nope")


def test_hub_id_offline_says_how_to_use_a_local_copy(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(RecdiffError) as err:
        load_model("tomg-group-umd/huginn-0125")
    msg = str(err.value)
    assert "tomg-group-umd/huginn-0125" in msg and "model.path=" in msg and "\n" not in msg


def test_config_missing_keys(tmp_path):
    d = _copy(tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    del cfg["n_embd"], cfg["block_size"]
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(RecdiffError, match="missing required keys n_embd, block_size"):
        load_model(d)


def test_config_not_json(tmp_path):
    d = _copy(tmp_path)
    (d / "config.json").write_text("{not json")
    with pytest.raises(RecdiffError, match="not valid JSON"):
        load_model(d)


def test_mismatched_tensor_shapes(tmp_path):
    d = _copy(tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    cfg["intermediate_size"] = 200
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(RecdiffError, match=r"mlp\.fc\.weight has shape \(352, 64\), config.json implies \(400, 64\)"):
        load_model(d)


def test_missing_weights(tmp_path):
    d = _copy(tmp_path)
    (d / "model.safetensors").unlink()
    with pytest.raises(RecdiffError, match="no model\\*.safetensors"):
        load_model(d)


def test_prompt_longer_than_block_size(model):
    with pytest.raises(RecdiffError, match="exceeds the model's block_size 512"):
        generate(model, [1] * 500, "static", max_new_tokens=20, r=2)
    with pytest.raises(RecdiffError, match="block_size"):
        generate(model, [1] * 510, "diffusion", max_new_tokens=8)


def test_unknown_sampler_and_parameter(model):
    with pytest.raises(RecdiffError, match="unknown sampler 'greedy'"):
        generate(model, [1, 2], "greedy")
    with pytest.raises(RecdiffError,
                       match="unknown parameter 'r_innr' for sampler 'diffusion' \\(did you mean 'r_inner'\\?\\)"):
        generate(model, [1, 2], "diffusion", r_innr=4)
    with pytest.raises(RecdiffError, match="unknown parameter 'r_inner' for sampler 'static'"):
        generate(model, [1, 2], "static", r_inner=4)


@pytest.mark.parametrize("sampler", ["static", "adaptive", "speculative", "diffusion"])
@pytest.mark.parametrize("r", [0, -3, 2.5, 10**6])
def test_recurrence_out_of_range(model, sampler, r):
    with pytest.raises(RecdiffError, match=f"r={r!r} must be an integer in \\[1, 1024\\]"):
        generate(model, [1, 2], sampler, r=r)


@pytest.mark.parametrize("sampler, params, message", [
    ("diffusion", {"r": 4, "r_inner": 8}, "r_inner=8 exceeds r=4"),
    ("diffusion", {"wavefront": 4, "headway": 5}, "headway=5 exceeds wavefront=4"),
    ("speculative", {"r": 4, "r_draft": 8}, "r_draft=8 exceeds r=4"),
])
def test_invalid_combinations_fail_in_the_api_as_in_the_sweep(model, sampler, params, message):
    from recdiff.params import SAMPLER_PARAMS

    with pytest.raises(RecdiffError, match=message):
        generate(model, [1, 2], sampler, **params)
    assert message in SAMPLER_PARAMS[sampler](**params).complaint()  # the sweep's plan checks the same rule


@pytest.mark.parametrize(
    "params, message",
    [
        ({"r_inner": 0}, "r_inner=0 must be an integer in \\[1, 1024\\]"),
        ({"wavefront": 0}, "wavefront=0 must be an integer >= 1"),
        ({"headway": 0}, "headway=0 must be an integer >= 1"),
        ({"beta": 1.5}, "beta=1.5 must be in \\[0, 1\\]"),
        ({"beta": -0.1}, "beta=-0.1 must be in \\[0, 1\\]"),
        ({"eta": 1.0}, "eta=1.0 must be in \\[0, 1\\)"),
        ({"eta": -0.5}, "eta=-0.5 must be in \\[0, 1\\)"),
        ({"beta_schedule": "cosine"}, "beta_schedule='cosine' must be one of constant, dampened, linear, sqrt"),
        ({"freeze": "sometimes"}, "freeze='sometimes' must be one of adaptive, fixed"),
        ({"epsilon": 0}, "epsilon=0 must be a number > 0"),
        ({"kv_cache": "per_step"}, "kv_cache='per_step' must be one of shared"),
        ({"pad_id": 9999}, "pad_id=9999 is outside the vocabulary"),
    ],
)
def test_bad_diffusion_configuration_fails_before_compute(model, params, message, monkeypatch):
    monkeypatch.setattr(model, "core_step", lambda *a, **k: pytest.fail("computed before validating"))
    with pytest.raises(RecdiffError, match=message):
        generate(model, [1, 2, 3], "diffusion", **params)


def test_other_bad_inputs(model):
    with pytest.raises(RecdiffError, match="is empty"):
        generate(model, [], "static")
    with pytest.raises(RecdiffError, match="outside the vocabulary"):
        generate(model, [1, 600], "static")
    with pytest.raises(RecdiffError, match="max_new_tokens=0"):
        generate(model, [1], "static", max_new_tokens=0)
    for t in (-1, float("nan"), "0.5"):
        with pytest.raises(RecdiffError, match="temperature"):
            generate(model, [1], "static", temperature=t)
    for seed in (1.5, "3", True):
        with pytest.raises(RecdiffError, match="seed=.* must be an integer"):
            generate(model, [1], "static", seed=seed)
    for prompts, message in [("hello", "must be a list of token ids"), (None, "must be a list of token ids"),
                             ([1.0, 2.0], "token ids must be integers"), ([[1, 2], 3], "mix token ids and lists"),
                             ([[1, 2], []], "prompt 1 is empty"), ([[1], [2, 600]], "prompt 1 holds token ids outside"),
                             ([], "is empty"), ([[1, 2], [3] * 600], "prompt 1 of 600 tokens .* block_size 512")]:
        with pytest.raises(RecdiffError, match=message):
            generate(model, prompts, "static")
        with pytest.raises(RecdiffError, match=message):  # warm-up checks them as generate does
            warm_up(model, prompts, "static", batch_size=2)
    with pytest.raises(RecdiffError, match="top_p"):
        generate(model, [1], "static", temperature=0.5, top_p=0)
    with pytest.raises(RecdiffError, match="stop_strings need a tokenizer"):
        generate(model, [1], "static", stop_strings=["\n"])
    with pytest.raises(RecdiffError, match="kv_cache='full' must be one of shared, per_step"):
        generate(model, [1], "static", kv_cache="full")
