"""Telling the families apart: a folder is recognised from its config.json and weight names, ``family=`` names one
instead, and a folder that fits none (or one only partly) is one line naming what did not fit. Loading never runs
the Python a folder carries. The retrofits' RoPE is transformers' own, whatever their unused ``rope_base`` says."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from recdiff import RecdiffError, load_model, save_pretrained
from recdiff.checkpoint import read_config, resolve_model_path
from recdiff.families import families, get_family
from tests.conftest import RAVEN_TINY, need_fixtures
from tests.families.conftest import FAMILY, SHIPPED, spec

EMBEDDED = "recdiff/assets/embedded"


def _copy(src, tmp_path, name="ckpt"):
    d = tmp_path / name
    shutil.copytree(src, d)
    return d


def _edit_config(d, **changes):
    cfg = json.loads((d / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (d / "config.json").write_text(json.dumps(cfg))


def _drop_weights(d, *names):
    tensors = load_file(d / "model.safetensors")
    for n in names:
        del tensors[n]
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})


def test_the_three_families_are_declared():
    assert {"huginn", "retro_llama", "retro_olmo"} <= set(families())
    with pytest.raises(RecdiffError, match="unknown model family 'gemma'; choose one of .*huginn"):
        get_family("gemma")


def test_huginn_folders_are_huginn():
    for d in (need_fixtures(RAVEN_TINY), need_fixtures(RAVEN_TINY / "perturbed"), Path(resolve_model_path(EMBEDDED))):
        assert read_config(d).family == "huginn"


def test_retro_folders_are_their_family_and_naming_it_agrees(retro_dir):
    want = FAMILY[spec(retro_dir)["family"]]
    assert read_config(retro_dir).family == want
    assert read_config(retro_dir, want).family == want
    other = next(n for n in families() if n != want)
    with pytest.raises(RecdiffError) as err:
        read_config(retro_dir, other)
    assert f"does not fit model family {other}" in str(err.value) and "\n" not in str(err.value)


def test_a_partly_olmo_folder_names_what_is_missing(tmp_path):
    d = _copy(SHIPPED / "olmo_mha", tmp_path)
    _drop_weights(d, "transformer.core_block.1.attn.k_norm.weight")
    with pytest.raises(RecdiffError) as err:
        load_model(d)
    msg = str(err.value)
    # one missing tensor is named in full (many are folded: "block attn.k_norm.weight")
    assert "fits no model family" in msg and "retro_olmo: missing transformer.core_block.1.attn.k_norm.weight" in msg
    assert "\n" not in msg


def test_a_retro_config_without_rope_theta_is_one_line(tmp_path):
    d = _copy(SHIPPED / "llama_gqa2", tmp_path)
    _edit_config(d, rope_theta=None)
    with pytest.raises(RecdiffError, match=r"closest, retro_llama: no rope_theta; also tried") as err:
        load_model(d)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("changes, message", [
    ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, r"rope_scaling type dynamic \(recdiff runs default, "),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, r"rope_scaling type yarn \(recdiff runs default, linear"),
    ({"head_dim": 8}, "head_dim=8 is not n_embd/n_heads=64/4"),
    ({"initial_state_mode": "skip-adapter"}, "initial_state_mode=skip-adapter"),
])
def test_what_recdiff_cannot_run_is_named(tmp_path, changes, message):
    d = _copy(SHIPPED / "llama_gqa2", tmp_path)
    _edit_config(d, **changes)
    with pytest.raises(RecdiffError, match=message) as err:
        load_model(d, family="retro_llama")
    assert "\n" not in str(err.value)


def test_huginn_weights_under_a_retro_config_fit_nothing(tmp_path):
    """Huginn's four-norm blocks with a retrofit's RoPE fields: no family has both."""
    d = _copy(need_fixtures(RAVEN_TINY), tmp_path)
    _edit_config(d, rope_theta=10000.0)
    assert read_config(d).family == "huginn"  # Huginn reads no rope_theta: the extra key does not matter
    with pytest.raises(RecdiffError, match="does not fit model family retro_llama: .*unexpected block norm_3.weight"):
        read_config(d, "retro_llama")


def test_loading_never_runs_the_folders_python(tmp_path):
    """The folder's auto_map names modules that would leave a mark (and fail) if anything imported them."""
    d = _copy(SHIPPED / "llama_gqa2", tmp_path)
    mark = tmp_path / "imported"
    for name in ("raven_config_minimal.py", "raven_modeling_minimal_llama.py"):
        (d / name).write_text(f"open({str(mark)!r}, 'w').write('x')\nraise SystemExit('imported')\n")
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["auto_map"]["AutoModelForCausalLM"] == "raven_modeling_minimal_llama.RavenForCausalLM"
    model = load_model(d)
    assert model.config.family == "retro_llama" and not mark.exists()
    assert not any("raven_modeling" in m or "raven_config" in m for m in sys.modules)


def test_rope_is_transformers_own_from_rope_theta_not_rope_base():
    """llama_gqa2: rope_theta 1e4, rope_base 5e5 (written by the conversion, never read); llama_gqa3_llama3: the
    llama3 scaling. The table is what transformers' LlamaRotaryEmbedding computes for these configs."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    assert json.loads((SHIPPED / "llama_gqa2" / "config.json").read_text())["rope_base"] == 500000.0
    for name in ("llama_gqa2", "llama_gqa3_llama3"):
        raw = json.loads((SHIPPED / name / "config.json").read_text())
        model = load_model(SHIPPED / name)
        hf = LlamaConfig(hidden_size=raw["n_embd"], num_attention_heads=raw["n_heads"], head_dim=raw["head_dim"],
                         num_key_value_heads=raw["num_key_value_heads"], rope_theta=raw["rope_theta"],
                         rope_scaling=raw.get("rope_scaling"), max_position_embeddings=raw["max_position_embeddings"])
        T = 100
        cos, sin = LlamaRotaryEmbedding(hf)(torch.zeros(1, T, raw["head_dim"]), torch.arange(T)[None])
        half = raw["head_dim"] // 2
        ours = model.freqs_cis[0, :T, 0]  # (T, D/2, 2)
        for ref, i in ((cos[0], 0), (sin[0], 1)):
            assert torch.equal(ref[:, :half], ref[:, half:])  # rotate-half: each frequency twice
            torch.testing.assert_close(ours[..., i], ref[:, :half], atol=1e-6, rtol=0)
    scaled = load_model(SHIPPED / "llama_gqa3_llama3").freqs_cis  # without its scaling, low frequencies turn faster
    raw = json.loads((SHIPPED / "llama_gqa3_llama3" / "config.json").read_text())
    inv = 1.0 / (raw["rope_theta"] ** (torch.arange(0, raw["head_dim"], 2).float() / raw["head_dim"]))
    plain = torch.outer(torch.arange(scaled.shape[1]).float(), inv).sin()
    assert (scaled[0, :, 0, :, 1] - plain).abs().max() > 0.5


def test_config_token_ids_of_a_retrofit_are_not_read(tmp_path):
    """The conversions copy Huginn's token ids (65504 … 65509), ordinary tokens of a Llama or OLMo tokenizer: the
    tokenizer's end-of-text ends generation instead."""
    d = _copy(SHIPPED / "olmo_mha", tmp_path)
    _edit_config(d, eos_token_id=65505, bos_token_id=65504)
    assert load_model(d).config.eos_token_id is None
    h = _copy(need_fixtures(RAVEN_TINY), tmp_path, "huginn")
    _edit_config(h, eos_token_id=[65505, 65508])
    assert load_model(h).config.eos_token_id == [65505, 65508]


def test_save_and_load_round_trip_per_family(retro_dir, tmp_path, load_fixture_model):
    model = load_fixture_model(retro_dir)
    out = save_pretrained(model, tmp_path / "saved")
    back = load_model(out)
    assert back.config.family == model.config.family
    raw = json.loads((out / "config.json").read_text())
    assert "family" not in raw and raw["rope_theta"] == model.config.rope_theta and "lm_head.weight" in \
        load_file(out / "model.safetensors")
    ids = torch.tensor([[1, 5, 9, 200, 3]])
    assert torch.equal(back(ids, r=4)[0], model(ids, r=4)[0])
