"""Parcae (a core of its own width, diagonal / linear / additive injection, value embeddings) against its reference
code (tests/fixtures/parcae_tiny, made by minchoCoin/parcae's ``parcae_lm`` and ``receval`` code;
``RECDIFF_PARCAE_FIXTURES`` names another folder of the same layout, e.g. held-out checkpoints made by an independent
run of ``tests/fixtures/make_parcae_fixtures.py --spec``).

Every folder loads from the hub layout (``config.json`` with ``_class_name``, the reference's state dict as
``pytorch_model.bin``, ``model.pt`` or safetensors) as the ``parcae`` family without running its Python; recdiff
computes the reference's logits and recurrent states at every recorded depth (within the reference's own float32
spread, tests/spread.py), from a zero state and from the reference's own like-init draw; greedy static AR with
per-step caches gives the reference's tokens at every r on every prompt, alone and batched; LoopSpec and speculative
decoding give static AR's tokens; adaptive compute and the diffusion sampler (both freeze rules) decode on it."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from recdiff import RecdiffError, generate, load_model, save_pretrained
from tests.conftest import REPO
from tests.spread import assert_within_spread, max_abs_diff

SHIPPED = REPO / "tests" / "fixtures" / "parcae_tiny"
PARCAE = Path(os.environ.get("RECDIFF_PARCAE_FIXTURES", SHIPPED))
DIRS = sorted(d for d in PARCAE.iterdir() if (d / "generate.json").is_file()) if PARCAE.is_dir() else []


# the fast tier (make test-fast) checks one folder, the real 140M model's layout cut down (or the first of another
# folder's set); the full suite every folder, each of its own injection, core width, ties and init (as raven_tiny's
# perturbed twin runs in the full suite only)
FAST = next((d for d in DIRS if d.name == "small140m_like"), DIRS[0] if DIRS else None)


@pytest.fixture(params=[d if d == FAST else pytest.param(d, marks=pytest.mark.slow) for d in DIRS],
                ids=lambda d: d.name)
def parcae_dir(request: pytest.FixtureRequest) -> Path:
    return request.param


def cases(d: Path) -> tuple[dict[str, list[int]], list[dict], dict]:
    g = json.loads((d / "generate.json").read_text())
    return json.loads((d / "prompts.json").read_text()), g["cases"], g["meta"]


def test_each_folder_loads_as_parcae_without_running_its_code(parcae_dir, load_fixture_model):
    model = load_fixture_model(parcae_dir)
    raw = json.loads((parcae_dir / "config.json").read_text())
    assert raw["_class_name"] == "ParcaeConfig" and model.config.family == "parcae"
    assert model.config.state_width == raw["recurrent_embedding_dimension"]
    assert model.config.padded_vocab_size > model.config.vocab_size          # logits over the padded vocabulary
    _, _, meta = cases(parcae_dir)
    used = {f"{part}.{i}" for part, i in model.ve_use}
    assert used == set(meta["value_embeddings"]["used"])                     # the two parity rules, as recorded


def test_logits_and_states_at_every_depth_match_reference(parcae_dir, load_fixture_model):
    """Zero initial state (the reference's ``state_init="zero"``) and, for like-init checkpoints, the state the
    reference drew (``x0``): the logits and the state C reads, within the reference's float32 spread."""
    model = load_fixture_model(parcae_dir)
    ref, ref64 = load_file(parcae_dir / "forward.safetensors"), load_file(parcae_dir / "forward_float64.safetensors")
    prompts, _, meta = cases(parcae_dir)
    checked = 0
    for name, ids in prompts.items():
        x = torch.tensor([ids])
        e = model.embed(x)
        assert_within_spread(e, ref[f"{name}.e"], max_abs_diff(ref[f"{name}.e"], ref64[f"{name}.e"]), f"{name}.e")
        for r in meta["spec"]["rs"]:
            logits, state = model(x, r=r)
            for key, got in ((f"{name}.r{r}.logits", logits), (f"{name}.r{r}.state", state)):
                if key in ref:
                    assert_within_spread(got, ref[key], max_abs_diff(ref[key], ref64[key]), key)
                    checked += 1
            if f"{name}.r{r}.x0" in ref:  # the reference's own like-init draw, fed to recdiff's loop
                s = ref[f"{name}.r{r}.x0"]
                for i in range(r):
                    s = model.core_step(s, e, step=i, tokens=x)
                key = f"{name}.r{r}.x0.logits"
                assert_within_spread(model.decode(s, tokens=x), ref[key], max_abs_diff(ref[key], ref64[key]), key)
                checked += 1
    assert checked >= len(prompts) * len(meta["spec"]["rs"])


def test_greedy_static_ar_at_every_depth_is_the_references(parcae_dir, load_fixture_model):
    """Per-step caches (the reference's ParcaeDynamicCache), a zero initial state, every r and prompt recorded."""
    model = load_fixture_model(parcae_dir)
    prompts, recorded, meta = cases(parcae_dir)
    assert {c["r"] for c in recorded} == set(meta["spec"]["rs"])
    for c in recorded:
        if not c["is_parity_case"]:
            continue
        res = generate(model, prompts[c["prompt"]], "static", max_new_tokens=len(c["new_tokens"]), r=c["r"],
                       init_scale=0.0, kv_cache="per_step", stop_token_ids=[])
        assert res.tokens == c["new_tokens"], (c["prompt"], c["r"])
        assert res.stats["core_passes"] == c["r"] * len(res.tokens)


def test_a_batch_of_the_prompts_gives_each_what_it_gets_alone(parcae_dir, load_fixture_model):
    """The reference ignores attention masks: batching prompts of other lengths is recdiff's own to get right."""
    model = load_fixture_model(parcae_dir)
    prompts, recorded, meta = cases(parcae_dir)
    r = max(meta["spec"]["rs"])
    want = {c["prompt"]: c["new_tokens"] for c in recorded if c["r"] == r and c["is_parity_case"]}
    names = list(want)
    batch = generate(model, [prompts[n] for n in names], "static", max_new_tokens=len(want[names[0]]), r=r,
                     kv_cache="per_step", stop_token_ids=[], batch_size=len(names))
    assert [b.tokens for b in batch] == [want[n] for n in names]


@pytest.mark.parametrize("sampler, params", [("loopspec", {"r_draft": 1}), ("loopspec", {"r_draft": 2, "r_draft2": 4}),
                                             ("speculative", {"r_draft": 2, "lookahead": 3})])
def test_the_lossless_samplers_give_the_references_tokens(parcae_dir, load_fixture_model, sampler, params):
    model = load_fixture_model(parcae_dir)
    prompts, recorded, _ = cases(parcae_dir)
    ran = 0
    for c in recorded:
        if c["r"] not in (4, 8) or not c["is_parity_case"] or params.get("r_draft2", 0) >= c["r"]:
            continue
        res = generate(model, prompts[c["prompt"]], sampler, max_new_tokens=len(c["new_tokens"]), r=c["r"],
                       kv_cache="per_step", stop_token_ids=[], **params)
        assert res.tokens == c["new_tokens"], (sampler, c["prompt"], c["r"])
        ran += 1
    assert ran


PARCAE_SAMPLERS = [("adaptive", {"r": 8, "epsilon": 0.05, "kv_cache": "per_step"}),
                   ("adaptive", {"r": 8, "epsilon": 0.05}),
                   ("diffusion", {"r": 8, "r_inner": 2}),
                   ("diffusion", {"r": 8, "r_inner": 2, "freeze": "fixed"}),
                   ("diffusion", {"r": 8, "r_inner": 1, "eta": 0.5, "beta": 0.2, "init_scale": 1.0, "wavefront": 4,
                                  "headway": 2})]


@pytest.mark.parametrize("sampler, params", PARCAE_SAMPLERS,
                         ids=[f"{s}-{i}" for i, (s, _) in enumerate(PARCAE_SAMPLERS)])
def test_adaptive_and_diffusion_decode_and_batch_alone(load_fixture_model, sampler, params):
    """On the hub-like checkpoint: each sampler decodes every token asked for, and a batch of prompts of other
    lengths gives each prompt (with its own seed) what it gets alone."""
    model = load_fixture_model(SHIPPED / "small140m_like")
    prompts = list(json.loads((SHIPPED / "small140m_like" / "prompts.json").read_text()).values())
    kw = dict(stop_token_ids=[], seed=3, **params)
    alone = [generate(model, p, sampler, max_new_tokens=6, **kw) for p in prompts]
    batch = generate(model, prompts, sampler, max_new_tokens=6, batch_size=2, **kw)
    assert all(len(a.tokens) == 6 for a in alone)
    assert [a.tokens for a in alone] == [b.tokens for b in batch]


def test_like_init_is_init_scale_one_of_the_references_std(load_fixture_model):
    """α = 1 draws the reference's like-init law: a ±3σ truncated normal with the outer width's embedding std,
    times the embedding scale (takase: √n_embd), at the core's width."""
    for name in ("small140m_like", "add_takase_likeinit"):
        model = load_fixture_model(SHIPPED / name)
        like = json.loads((SHIPPED / name / "generate.json").read_text())["meta"]["like_init"]
        g = torch.Generator().manual_seed(0)
        x = model.initial_state(torch.zeros(64, 64, model.config.n_embd), 1.0, g)
        assert x.shape[-1] == model.config.state_width
        sigma = like["effective_std"] * 0.98654  # the std of a unit normal truncated at ±3
        assert abs(float(x.std()) / sigma - 1) < 0.03 and float(x.abs().max()) <= like["bound"] * (1 + 1e-6)


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_a_folder_missing_one_tensor_is_one_line_naming_it(tmp_path):
    for name, weights in (("linear_widecore_untied", "model.safetensors"), ("small140m_like", "pytorch_model.bin")):
        d = _copy(SHIPPED / name, tmp_path / name)
        path = d / weights
        tensors = load_file(path) if weights.endswith("safetensors") else torch.load(path, weights_only=True)
        gone = "transformer.core_block.0.attn.c_k.weight"
        del tensors[gone]
        save_file(tensors, path) if weights.endswith("safetensors") else torch.save(tensors, path)
        with pytest.raises(RecdiffError) as err:
            load_model(d)
        msg = str(err.value)
        assert "\n" not in msg and gone in msg and "parcae" in msg


def test_a_misshapen_tensor_is_one_line_naming_it(tmp_path):
    d = _copy(SHIPPED / "linear_widecore_untied", tmp_path / "m")
    tensors = load_file(d / "model.safetensors")
    tensors["transformer.adapter.adapter.weight"] = tensors["transformer.adapter.adapter.weight"][:, :-1].contiguous()
    save_file(tensors, d / "model.safetensors")
    with pytest.raises(RecdiffError, match="transformer.adapter.adapter.weight has shape") as err:
        load_model(d)
    assert "\n" not in str(err.value)


class _Mark:
    """A pickle that would run code on loading (writes a file where it is unpickled)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.write_text, (Path(self.path), "ran"))


def test_a_weights_file_holding_anything_but_tensors_is_refused_before_any_code_runs(tmp_path):
    mark = tmp_path / "ran.txt"
    for what, obj in (("code", {"transformer.wte.weight": _Mark(str(mark))}),
                      ("a number", {"transformer.wte.weight": torch.zeros(2), "step": 3}),
                      ("nested", {"model": {"transformer.wte.weight": torch.zeros(2)}})):
        d = _copy(SHIPPED / "small140m_like", tmp_path / what.replace(" ", "_"))
        with open(d / "pytorch_model.bin", "wb") as f:
            if what == "code":
                pickle.dump(obj, f)
            else:
                torch.save(obj, f)
        with pytest.raises(RecdiffError) as err:
            load_model(d)
        assert "\n" not in str(err.value) and "pytorch_model.bin" in str(err.value), what
    assert not mark.exists()


def test_a_config_the_reference_could_not_run_is_one_line(tmp_path):
    d = _copy(SHIPPED / "linear_widecore_untied", tmp_path / "m")
    raw = json.loads((d / "config.json").read_text())
    raw["recurrent_num_attention_heads"] = 4   # core heads 72 / 4 = 18 wide, the outer ones 12
    (d / "config.json").write_text(json.dumps(raw))
    with pytest.raises(RecdiffError, match="one RoPE table") as err:
        load_model(d, family="parcae")
    assert "\n" not in str(err.value)


def test_depth_zero_is_one_line(load_fixture_model):
    with pytest.raises(RecdiffError) as err:
        generate(load_fixture_model(SHIPPED / "small140m_like"), [1, 2, 3], "static", r=0, max_new_tokens=2)
    assert "\n" not in str(err.value) and "r=0" in str(err.value)


def test_save_pretrained_writes_a_folder_the_reference_layout_reads_back(load_fixture_model, tmp_path):
    """recdiff's fused q/k/v split back into c_q, c_k, c_v; the config the reference's ParcaeConfig fields; the
    folder loads again as Parcae with the same logits."""
    src = SHIPPED / "linear_widecore_untied"
    model = load_fixture_model(src)
    out = save_pretrained(model, tmp_path / "again")
    theirs, ours = load_file(src / "model.safetensors"), load_file(out / "model.safetensors")
    assert set(ours) == set(theirs) and all(torch.equal(ours[k], theirs[k]) for k in theirs)
    raw, back = json.loads((src / "config.json").read_text()), json.loads((out / "config.json").read_text())
    assert back["_class_name"] == "ParcaeConfig" and set(raw) <= set(back) | {"torch_dtype"}
    again = load_model(out)
    ids = torch.tensor([[1, 2, 3, 4]])
    assert again.config.family == "parcae" and torch.equal(again(ids, r=3)[0], model(ids, r=3)[0])


def test_the_speed_bench_pairs_parcae_rows_with_static_ar_at_its_depth(capsys):
    """``python -m recdiff.bench --depth 8``: every row at r = 8, each ratio paired with static r=8; the core's
    own K/V width counted apart from the outer layers'."""
    from recdiff.tools.speed import main as bench_main
    from recdiff.tools.speed import read_bytes

    d = SHIPPED / "linear_widecore_untied"
    bench_main(["--models", str(d), "--depth", "8", "--samplers", "static r=8,diffusion defaults,loopspec K=1",
                "--prompts", "2", "--repeats", "2", "--max-new-tokens", "3", "--modes", "batch-1 eager"])
    out = capsys.readouterr().out
    assert "ratio diffusion defaults / static r=8 — batch-1 eager:" in out
    assert "ratio loopspec K=1 / static r=8" in out and "(ideal (r+1)/(r'+1) = 1.80x)" in out
    cfg = load_model(d).config
    rb = read_bytes(load_model(d))
    assert rb.kv == 2 * cfg.num_key_value_heads * cfg.head_dim * 4 and rb.kv_core == 2 * cfg.state_width * 4
