"""The default embedded model (recdiff/assets/embedded, task `compose`) loads like the real model, carries its task,
and needs depth: real greedy generation on held-out problems gets better as r grows, up to r=32. The fast tier
decodes it (one sampler, a few problems); the depth and sampler comparisons are ``slow``."""

import json
from pathlib import Path

import pytest
import torch

import recdiff
import recdiff.checkpoint as load
from recdiff.benchmarks import checkpoint_task, compose, get_benchmark
from recdiff.tools.evaluate_embedded import ASSET_DIR

pytestmark = [pytest.mark.skipif(not (ASSET_DIR / "model.safetensors").is_file(), reason="no shipped checkpoint")]

# Measured on the shipped checkpoint (MODEL_CARD.md, 200 held-out problems, greedy): see the bars below, which sit
# well inside those figures on the first N_SLICE problems; chance is 0.1 (one digit of ten).
N_SLICE = 64


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    return load.load_model(ASSET_DIR)


def test_files_in_official_layout_small_and_carrying_the_task():
    names = {p.name for p in ASSET_DIR.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "MODEL_CARD.md",
            "eval_results.json", compose.DEFINITION_FILE} <= names
    assert sum(p.stat().st_size for p in ASSET_DIR.iterdir()) < 20 * 2**20
    get_benchmark("compose").check_model(ASSET_DIR)          # the same permutations as the benchmark's
    assert checkpoint_task(ASSET_DIR) == "compose"
    fmt = json.loads((ASSET_DIR / compose.DEFINITION_FILE).read_text())["format"]
    assert fmt == compose.DEFAULT_FORMAT


def test_default_configs_point_at_the_asset_and_its_benchmark():
    import yaml  # hydra dependency

    from recdiff.schema import model_name

    root = Path(__file__).resolve().parents[2]
    cfg = yaml.safe_load((root / "conf" / "model" / "embedded.yaml").read_text())
    assert model_name(cfg["path"]) == "embedded"   # the name (and the study's prefix) follows the path
    assert (root / cfg["path"]).resolve() == ASSET_DIR.resolve()
    defaults = yaml.safe_load((root / "conf" / "config.yaml").read_text())["defaults"]
    assert {"model": "embedded"} in defaults and {"benchmark": "compose"} in defaults


def _generate(model, problems, bench, **params):
    tok = model.tokenizer
    prompts = [tok.encode(bench.render(p, tok), add_special_tokens=False) for p in problems]
    res = recdiff.generate(model, prompts, max_new_tokens=48, stop_token_ids=[tok.eos_token_id],
                           stop_strings=bench.stop_strings, **params)
    texts = [tok.decode(r.tokens, skip_special_tokens=True) for r in res]
    return texts, bench.score_all(problems, texts), res


@pytest.mark.slow
def test_depth_pays_in_real_generation(model):
    """Static AR: r=32 solves most held-out problems in the trained long format, r=4 and r=8 solve only the short
    ones (about one letter per recurrence), and r=64 is no better than r=32 (the latents have converged)."""
    bench = get_benchmark("compose", limit=N_SLICE)
    problems = bench.problems()
    acc, by_k = {}, {}
    for r in (4, 8, 32, 64):
        texts, scores, res = _generate(model, problems, bench, sampler="static", r=r)
        acc[r] = sum(s.correct for s in scores) / len(scores)
        by_k[r] = [s.correct for s, p in zip(scores, problems) if p.meta["k"] > 12]
        if r == 32:
            assert all(f"\nThe value is {s.extracted}.\n#### {s.extracted}" in t for t, s in zip(texts, scores)
                       if s.correct)                                          # the trained format
            assert sum(len(x.tokens) for x in res) / len(res) >= 24          # long answers
    assert acc[32] >= 0.85, acc
    assert acc[4] <= 0.5 * acc[32] and acc[8] <= 0.8 * acc[32], acc
    assert abs(acc[64] - acc[32]) <= 0.05, acc
    assert sum(by_k[8]) < 0.5 * sum(by_k[32]), acc                           # long problems need depth


@pytest.mark.slow
def test_diffusion_defaults_match_static_r32(model):
    """The diffusion sampler at the paper's defaults answers as static r=32 does, with far fewer core passes."""
    bench = get_benchmark("compose", limit=32)
    problems = bench.problems()
    _, s_static, r_static = _generate(model, problems, bench, sampler="static", r=32)
    _, s_diff, r_diff = _generate(model, problems, bench, sampler="diffusion", r=32, r_inner=4, epsilon=0.03,
                                  beta=0.0, eta=0.1, wavefront=128)
    assert abs(sum(s.correct for s in s_diff) - sum(s.correct for s in s_static)) <= 1
    passes = sum(x.stats["core_passes"] for x in r_diff) / sum(x.stats["core_passes"] for x in r_static)
    assert passes < 0.4, passes


def test_the_shipped_model_answers_held_out_problems(model):
    """What a user's first `recdiff.generate` on the default does: the diffusion sampler at the paper's defaults,
    batched, answers held-out problems in the trained format (MODEL_CARD.md: 1.000 at r = 32 on 200 of them)."""
    bench = get_benchmark("compose", limit=8)
    problems = bench.problems()
    texts, scores, res = _generate(model, problems, bench, sampler="diffusion", r=32, r_inner=4, epsilon=0.03,
                                   beta=0.0, eta=0.1, wavefront=128)
    assert sum(s.correct for s in scores) >= 7, [s.extracted for s in scores]
    assert all(f"#### {s.extracted}" in t for t, s in zip(texts, scores) if s.correct)
    assert all(x.stats["core_passes"] < 32 * x.stats["new_tokens"] for x in res)     # fewer passes than static r=32
