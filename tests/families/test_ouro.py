"""Ouro (an injection-free loop with an exit gate) against its reference code (tests/fixtures/ouro_tiny, made by the
Hugging Face remote code ``modeling_ouro.py``; ``RECDIFF_OURO_FIXTURES`` names another folder of the same layout,
e.g. held-out checkpoints made by an independent run of the reference).

Every folder loads from the hub layout as the ``ouro`` family without running its Python; recdiff computes the
reference's logits and normed states at every exit step and the gate's exit probabilities (within the reference's
own float32 spread, tests/spread.py); greedy static AR at every depth 1 … total_ut_steps with per-step caches gives
the reference's tokens (its ``exit_at_step``), the gate's readout gives its ``exit_threshold`` tokens and exit steps,
and the lossless samplers (LoopSpec, speculative) give static AR's tokens on it too."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from recdiff import RecdiffError, generate, load_model, save_pretrained
from tests.conftest import REPO, read_cases
from tests.spread import assert_within_spread, max_abs_diff

SHIPPED = REPO / "tests" / "fixtures" / "ouro_tiny"
OURO = Path(os.environ.get("RECDIFF_OURO_FIXTURES", SHIPPED))
OURO_DIRS = sorted(d for d in OURO.iterdir() if (d / "generate.json").is_file()) if OURO.is_dir() else []


@pytest.fixture(params=OURO_DIRS, ids=lambda d: d.name)
def ouro_dir(request: pytest.FixtureRequest) -> Path:
    return request.param


def depth(model) -> int:
    return model.config.mean_recurrence   # total_ut_steps


def test_each_folder_loads_as_ouro_without_running_its_code(ouro_dir, load_fixture_model):
    model = load_fixture_model(ouro_dir)
    raw = json.loads((ouro_dir / "config.json").read_text())
    assert model.config.family == "ouro" and "auto_map" in raw          # auto_map is data, never imported
    assert model.config.n_layers_in_prelude == model.config.n_layers_in_coda == 0
    assert depth(model) == raw["total_ut_steps"] and model.exit_gate is not None
    assert "adapter" not in model.transformer                           # no input injection


def test_forward_at_every_exit_step_and_the_gate_match_reference(ouro_dir, load_fixture_model):
    model = load_fixture_model(ouro_dir)
    ref, ref64 = load_file(ouro_dir / "forward.safetensors"), load_file(ouro_dir / "forward_float64.safetensors")
    S = depth(model)
    for name, ids in json.loads((ouro_dir / "prompts.json").read_text()).items():
        x = torch.tensor([ids])
        for t in range(1, S + 1):
            logits, state = model(x, r=t)
            for key, got in ((f"{name}.t{t}.logits", logits), (f"{name}.t{t}.hidden", state)):
                assert_within_spread(got, ref[key], max_abs_diff(ref[key], ref64[key]), key)
        e = model.embed(x)
        s, lam = torch.zeros_like(e), []
        for t in range(S):
            s = model.core_step(s, e, step=t)
            lam.append(model.exit_probability(s))
        lam = torch.stack(lam, -1)
        # the gate: λ and the exit distribution p_t = λ_t Π_{j<t}(1 − λ_j), the rest at the last loop
        spread = max(max_abs_diff(ref[f"{name}.lambda"], ref64[f"{name}.lambda"]), 1e-7)
        assert_within_spread(lam, ref[f"{name}.lambda"], spread, f"{name}.lambda")
        rest = torch.cumprod(1 - lam, -1)
        pdf = torch.cat([lam[..., :1], lam[..., 1:-1] * rest[..., :-2], rest[..., -2:-1]], -1)
        spread = max(max_abs_diff(ref[f"{name}.exit_pdf"], ref64[f"{name}.exit_pdf"]), 1e-7)
        assert_within_spread(pdf, ref[f"{name}.exit_pdf"], spread, f"{name}.exit_pdf")


def test_greedy_static_ar_at_every_depth_is_the_references_exit_at_step(ouro_dir, load_fixture_model):
    """Per-step caches, a zero initial state: R = 1 … total_ut_steps (the reference's exit_at_step R − 1)."""
    model = load_fixture_model(ouro_dir)
    prompts, cases = read_cases(ouro_dir)
    steps = [c for c in cases if "exit_at_step" in c["call_kwargs"]]
    assert {c["call_kwargs"]["exit_at_step"] + 1 for c in steps} == set(range(1, depth(model) + 1))
    for c in steps:
        R = c["call_kwargs"]["exit_at_step"] + 1
        res = generate(model, prompts[c["prompt"]], "static", max_new_tokens=len(c["new_tokens"]), r=R,
                       init_scale=0.0, kv_cache="per_step", stop_token_ids=[])
        assert res.tokens == c["new_tokens"], (c["case"], c["prompt"])
        assert res.stats["core_passes"] == R * len(res.tokens)


def test_the_gates_readout_is_the_references_exit_threshold(ouro_dir, load_fixture_model):
    """Static AR at total_ut_steps with ``exit_threshold`` q computes every loop and reads each token out at its
    gate's exit, as the reference does: its tokens and each token's exit step (its default is q = 1)."""
    model = load_fixture_model(ouro_dir)
    prompts, cases = read_cases(ouro_dir)
    gated = [c for c in cases if "exit_at_step" not in c["call_kwargs"]]
    assert gated
    for c in gated:
        q = c["call_kwargs"].get("exit_threshold", 1.0)
        n = len(c["new_tokens"])
        res = generate(model, prompts[c["prompt"]], "static", max_new_tokens=n, r=depth(model), exit_threshold=q,
                       kv_cache="per_step", stop_token_ids=[])
        assert res.tokens == c["new_tokens"], (c["case"], c["prompt"])
        assert res.stats["exit_steps"][:n] == c["exit_steps"], (c["case"], c["prompt"])


def test_adaptive_compute_by_the_gate(ouro_dir, load_fixture_model):
    """At q = 1 the gate never exits before the last loop: adaptive compute is static AR at full depth, loop for
    loop; below, its core passes per token fall to the exit steps the reference reads out at (no later loop is
    computed), for either rule of what later tokens see at the loops an exited token skipped."""
    model = load_fixture_model(ouro_dir)
    prompts, cases = read_cases(ouro_dir)
    S = depth(model)
    for c in cases:
        q = c["call_kwargs"].get("exit_threshold")
        if q is None:
            continue
        n, prompt = len(c["new_tokens"]), prompts[c["prompt"]]
        for rule in ("mask", "copy"):
            res = generate(model, prompt, "adaptive", max_new_tokens=n, r=S, exit_threshold=q, kv_cache="per_step",
                           exit_kv=rule, stop_token_ids=[])
            taken = res.stats["steps_per_token"]
            if q == 1.0:
                assert res.tokens == c["new_tokens"] and taken == [S] * n
            # the first token's loops are the prompt's (all computed); each later one stops at its exit
            assert taken[1:] == res.stats["exit_steps"][1:] and all(1 <= t <= S for t in taken)
            assert res.stats["exit_steps"][0] == c["exit_steps"][0]      # the prompt is the reference's


@pytest.mark.parametrize("sampler, params", [("loopspec", {"r_draft": 1}), ("loopspec", {"r_draft": 1, "r_draft2": 2}),
                                             ("speculative", {"r_draft": 1, "lookahead": 3})])
def test_the_lossless_samplers_give_static_ars_tokens(ouro_dir, load_fixture_model, sampler, params):
    model = load_fixture_model(ouro_dir)
    prompts, cases = read_cases(ouro_dir)
    for c in cases:
        R = c["call_kwargs"].get("exit_at_step", -1) + 1
        if R < 2 or (params.get("r_draft2") and params["r_draft2"] >= R):
            continue
        res = generate(model, prompts[c["prompt"]], sampler, max_new_tokens=len(c["new_tokens"]), r=R,
                       kv_cache="per_step", stop_token_ids=[], **params)
        assert res.tokens == c["new_tokens"], (sampler, c["case"], c["prompt"])


@pytest.mark.parametrize("sampler, params, message", [
    ("diffusion", {}, "the diffusion sampler needs input injection, which a ouro model has not"),
    ("static", {"init_scale": 0.5}, "init_scale=0.5 on a ouro model: its loop has no initial state to draw"),
])
def test_what_the_loop_cannot_mean_is_one_line(load_fixture_model, sampler, params, message):
    model = load_fixture_model(OURO_DIRS[0])
    with pytest.raises(RecdiffError, match=re.escape(message)) as err:
        generate(model, [1, 2, 3], sampler, max_new_tokens=2, **params)
    assert "\n" not in str(err.value)


def test_a_gate_on_a_model_without_one_is_one_line(load_fixture_model):
    from tests.conftest import RAVEN_TINY

    with pytest.raises(RecdiffError, match="exit_threshold needs an exit gate, which a huginn model has not"):
        generate(load_fixture_model(RAVEN_TINY), [1, 2, 3], "adaptive", max_new_tokens=2, exit_threshold=0.5)


def test_save_pretrained_writes_the_hub_layout_back(ouro_dir, load_fixture_model, tmp_path):
    """recdiff's fused q/k/v and gate/up split back into the reference's tensors, bit for bit, and the folder loads
    again as Ouro with the same logits."""
    model = load_fixture_model(ouro_dir)
    out = save_pretrained(model, tmp_path / ouro_dir.name)
    theirs, ours = load_file(ouro_dir / "model.safetensors"), load_file(out / "model.safetensors")
    assert set(ours) == set(theirs) and all(torch.equal(ours[k], theirs[k]) for k in theirs)
    again = load_model(out)
    ids = torch.tensor([[1, 2, 3, 4]])
    assert again.config.family == "ouro" and torch.equal(again(ids, r=2)[0], model(ids, r=2)[0])


# every sampler that runs on Ouro, with per-step caches; the gate's readout and its adaptive compute both ways
OURO_SAMPLERS = [("static", {"r": 3}), ("static", {"r": 4, "exit_threshold": 0.7}),
                 ("adaptive", {"r": 4, "exit_threshold": 0.7}),
                 ("adaptive", {"r": 4, "exit_threshold": 0.7, "exit_kv": "copy"}),
                 ("speculative", {"r": 4, "r_draft": 1, "lookahead": 2}),
                 ("loopspec", {"r": 4, "r_draft": 1, "r_draft2": 2})]


def _batch_prompts(d: Path) -> list[list[int]]:
    a, b = list(json.loads((d / "prompts.json").read_text()).values())[:2]
    return [a, b, a[:3], b[:5], a + b]


@pytest.mark.slow
@pytest.mark.parametrize("sampler, params", OURO_SAMPLERS, ids=[f"{s}-{i}" for i, (s, _) in enumerate(OURO_SAMPLERS)])
def test_a_batch_gives_each_prompt_what_it_gets_alone(load_fixture_model, sampler, params):
    d = OURO_DIRS[0]
    model = load_fixture_model(d)
    prompts, limits = _batch_prompts(d), [9, 4, 12, 1, 7]
    kw = dict(kv_cache="per_step", stop_token_ids=[], **params)
    alone = [generate(model, p, sampler, max_new_tokens=n, **kw) for p, n in zip(prompts, limits)]
    batch = generate(model, prompts, sampler, max_new_tokens=limits, batch_size=2, **kw)
    assert [a.tokens for a in alone] == [b.tokens for b in batch]
    assert [a.stats for a in alone] == [b.stats for b in batch]


@pytest.mark.slow
def test_graph_replay_and_compiled_decoding_give_the_eager_tokens(tmp_path):
    """The CUDA-graph path emulated on a CPU for every sampler, and the CPU compile path (quick inductor settings)
    for what only Ouro compiles: the injection-free recurrence with the gate's readout, and the gate's exit piece
    (the draft pieces are compiled on Huginn's layout in tests/engine/test_compile.py, the lane pieces by
    tests/engine/test_setting_changes.py's compiled walk)."""
    from tests.matrices import quick_compile

    d = OURO_DIRS[0]
    eager, graphs, compiled = load_model(d), load_model(d), load_model(d, compile=True)
    graphs.engine_options = {**graphs.engine_options, "emulate_graphs": True}
    quick_compile(compiled)
    prompts = _batch_prompts(d)
    for sampler, params in OURO_SAMPLERS:
        kw = dict(max_new_tokens=6, kv_cache="per_step", stop_token_ids=[], **params)
        want = [generate(eager, p, sampler, **kw).tokens for p in prompts]
        assert [r.tokens for r in generate(graphs, prompts, sampler, batch_size=3, **kw)] == want, sampler
        if params.get("exit_threshold") and params.get("exit_kv") is None:
            assert [r.tokens for r in generate(compiled, prompts, sampler, batch_size=3, **kw)] == want, sampler
