"""The pipelined self-speculative sampler (recdiff/samplers/loopspec.py) against references, not against itself.

- Lossless: on every family's reference fixtures (Huginn's raven_tiny and its perturbed twin, the retrofitted Llama
  and OLMo-2 folders of retro_tiny or ``RECDIFF_RETRO_FIXTURES``), at every recorded depth r >= 4 with per-step
  caches and a zero initial state, and every first readout K in {1, 2, 4} dividing r, with and without a second
  readout at 2K (the perturbed twin to r = 8): greedy LoopSpec gives exactly the tokens the authors' code gave for
  static AR at r. The fast tier runs four of them (branches and chains at depths 4 and 8, Huginn and one retrofitted
  folder); the rest is slow.
- By hand: on a closed-form model whose every readout names the same token, every proposal is right, and the
  cycles, recurrences waited and core passes are the formulas of a full pipeline.
- A sampled continuation's law is static AR's (slow; the rejection step alone: tests/samplers/test_rejection.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from recdiff import RecdiffError, generate, load_model
from tests.closed_form import ClosedForm
from tests.conftest import FIXTURE_DIRS, read_cases
from tests.families.conftest import RETRO_DIRS

FULL = {"full", None}  # the reference's per-step ("full") cache; the retrofits' cases name none (it is their default)


def schedules(r: int) -> list[tuple[int, int | None]]:
    """(K, K·X): every K in {1, 2, 4} that divides r and is below it, with no second readout and with one at 2K."""
    out = []
    for k in (1, 2, 4):
        if k < r and r % k == 0:
            out += [(k, None)] + ([(k, 2 * k)] if 2 * k < r else [])
    return out


def greedy_cases(d: Path) -> list[tuple[list[int], dict]]:
    """The folder's greedy static-AR cases with per-step caches and a zero initial state at r >= 4."""
    prompts, cases = read_cases(d)
    out = []
    for c in cases:
        kw = c["call_kwargs"]
        if c["sampler"] in ("generate_minimal", "generate") and kw.get("cache_lookup_strategy") in FULL \
                and kw.get("init_scale", 0.0) == 0.0 and kw["num_steps"] >= 4:
            out.append((prompts[c["prompt"]], c))
    return out


def matrix() -> list:
    """(folder, r, K, K·X) for every folder and depth it records; slow beyond the fast tier's share."""
    folders = [*FIXTURE_DIRS, *RETRO_DIRS]
    # the fast tier: branches and chains on the Huginn fixture and one retrofitted folder, at small depths
    fast = {(FIXTURE_DIRS[0] if FIXTURE_DIRS else None, 8, 2, 4), (FIXTURE_DIRS[0] if FIXTURE_DIRS else None, 8, 1, 2),
            (RETRO_DIRS[0] if RETRO_DIRS else None, 8, 2, None), (RETRO_DIRS[0] if RETRO_DIRS else None, 4, 1, 2)}
    out = []
    for d in folders:
        depths = sorted({c["call_kwargs"]["num_steps"] for _, c in greedy_cases(d)})
        if d.name == "perturbed":   # raven_tiny with other weights: its depths to 8 (r = 32 runs on raven_tiny)
            depths = [r for r in depths if r <= 8]
        for r in depths:
            for k, k2 in schedules(r):
                marks = () if (d, r, k, k2) in fast else (pytest.mark.slow,)
                out.append(pytest.param(d, r, k, k2, marks=marks, id=f"{d.parent.name}/{d.name}-r{r}-K{k}-X{k2}"))
    return out


@pytest.mark.parametrize("d, r, k, k2", matrix())
def test_greedy_loopspec_is_the_references_static_ar(d, r, k, k2, load_fixture_model):
    model = load_fixture_model(d)
    cases = [(p, c) for p, c in greedy_cases(d) if c["call_kwargs"]["num_steps"] == r]
    assert cases
    for prompt, c in cases:
        n = c["call_kwargs"]["max_new_tokens"]
        res = generate(model, prompt, "loopspec", max_new_tokens=n, r=r, r_draft=k, r_draft2=k2, init_scale=0.0,
                       kv_cache="per_step", stop_token_ids=[])
        assert res.tokens == c["new_tokens"][:n], (c["case"], c["prompt"])
        s = res.stats
        assert s["new_tokens"] == n and len(s["accepted"]) == n - 1
        # every committed token after the first was proposed by q1, by q2 or by neither, and the counts agree
        assert s["accepted"].count(1) == round((s["q1_acceptance"] or 0) * (n - 1))
        assert s["core_passes"] >= r * n and s["peak_lanes"] <= r // k + 1 + (r // k if k2 else 0)


@pytest.mark.slow
def test_a_batch_gives_each_prompt_what_it_gets_alone_also_with_branches(load_fixture_model):
    """Branches (a second readout at K = 1 makes many), side places, moves home and sampling: each prompt of a batch
    of three slots gets what it gets alone, greedy and sampled (each sequence's own random stream)."""
    from tests.matrices import LIMITS, batch_prompts

    d = FIXTURE_DIRS[0]
    model = load_fixture_model(d)
    prompts = batch_prompts(d)
    for temperature in (0.0, 1.0):
        kw = dict(r=8, r_draft=1, r_draft2=2, temperature=temperature, top_p=0.9)
        alone = [generate(model, p, "loopspec", max_new_tokens=n, **kw) for p, n in zip(prompts, LIMITS)]
        batch = generate(model, prompts, "loopspec", max_new_tokens=LIMITS, batch_size=3, **kw)
        assert [a.tokens for a in alone] == [b.tokens for b in batch]
        assert [a.stats for a in alone] == [b.stats for b in batch]
    assert any(2 in a.stats["accepted"] for a in alone)   # a second readout's branch was taken somewhere


@pytest.mark.parametrize("S, K", [(8, 2), (8, 4), (12, 3), (8, 1)])
def test_every_proposal_right_fills_the_pipeline_once(S, K):
    """Every readout names the script's next token, so each q1 proposal is committed: the first decoded token waits
    S recurrences (the pipeline fills), every later one K; all lanes together run S recurrences per token, as
    static AR; at most S/K lanes live (the length limit stops the last ones from starting)."""
    n = 7
    model = ClosedForm(script="abcdefghijklmnopqrstuvwxyz")
    res = generate(model, [1, 2, 3], "loopspec", max_new_tokens=n, r=S, r_draft=K, stop_token_ids=[])
    assert "".join(map(chr, res.tokens)) == "defghij"                 # script[p + 1] for p = 3 …
    s = res.stats
    assert s["steps"] == S // K + n - 2
    assert s["sequential_per_token"] == pytest.approx((S + (n - 2) * K) / (n - 1))
    assert s["core_passes"] == S * n and s["q1_acceptance"] == 1.0 and s["accepted"] == [1] * (n - 1)
    assert s["q2_acceptance"] is None and s["peak_lanes"] == min(S // K, n - 1)


@pytest.mark.parametrize("params, message", [
    ({"r": 32, "r_draft": 5}, "loopspec sampler: r_draft=5 must divide r=32 and be below it"),
    ({"r": 8, "r_draft": 8}, "loopspec sampler: r_draft=8 must divide r=8 and be below it"),
    ({"r": 32, "r_draft": 4, "r_draft2": 6}, "loopspec sampler: r_draft2=6 must be a multiple of r_draft=4 above it"),
    ({"r": 32, "r_draft": 4, "r_draft2": 32}, "loopspec sampler: r_draft2=32 must be a multiple of r_draft=4 above"),
    ({"r": 32, "kv_cache": "shared"}, "loopspec sampler: kv_cache='shared' must be one of per_step"),
    ({"r_draft2": 2.5}, "loopspec sampler: r_draft2=2.5 must be null or an integer"),
])
def test_a_bad_schedule_is_one_line(params, message):
    model = ClosedForm(script="ab")
    with pytest.raises(RecdiffError, match=re.escape(message)) as err:
        generate(model, [1, 2], "loopspec", max_new_tokens=3, **params)
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_sampled_continuations_have_static_ars_law(tmp_path):
    """On a tiny random model of six tokens at temperature 1, the pairs (first, second) of new tokens drawn by
    LoopSpec (q1 at depth 1, q2 at depth 2, full depth 4: every branch of the rejection taken) follow the exact law
    of static AR at depth 4, computed by enumeration from the model's no-cache forward; a chi-square test over the
    36 cells. Its twin with a wrong residual is rejected by the same test."""
    from scipy.stats import chisquare

    from recdiff import save_pretrained
    from recdiff.model import RecurrentDepthModel
    from recdiff.model_config import RecurrentConfig
    from recdiff.samplers import rejection

    torch.manual_seed(0)
    cfg = RecurrentConfig(n_embd=16, n_heads=2, n_layers_in_prelude=1, n_layers_in_recurrent_block=1,
                          n_layers_in_coda=1, intermediate_size=32, vocab_size=6, block_size=16)
    model = RecurrentDepthModel(cfg)
    model.init_weights(seed=3)
    with torch.no_grad():
        model.lm_head.weight.mul_(12.0)   # logits spread enough that depths 1, 2 and 4 disagree often
    model = load_model(save_pretrained(model, tmp_path / "tiny"))
    prompt, draws = [1, 2, 3], 3000
    exact = torch.zeros(6, 6, dtype=torch.float64)
    with torch.no_grad():
        first = torch.softmax(model(torch.tensor([prompt]), r=4)[0][0, -1].double(), -1)
        for a in range(6):
            second = torch.softmax(model(torch.tensor([prompt + [a]]), r=4)[0][0, -1].double(), -1)
            exact[a] = first[a] * second

    def counts() -> torch.Tensor:
        seen = torch.zeros(6, 6, dtype=torch.float64)
        # one stream per draw (a seed per prompt), decoded 64 at a time: each as it would be alone
        for res in generate(model, [prompt] * draws, "loopspec", max_new_tokens=2, r=4, r_draft=1, r_draft2=2,
                            temperature=1.0, seed=list(range(draws)), batch_size=64, stop_token_ids=[]):
            seen[res.tokens[0], res.tokens[1]] += 1
        return seen

    def p_value(seen: torch.Tensor) -> float:
        keep = exact.flatten() * draws >= 5           # cells a chi-square test can judge
        obs, exp = seen.flatten()[keep], exact.flatten()[keep] * draws
        return float(chisquare(obs.numpy(), (exp * obs.sum() / exp.sum()).numpy()).pvalue)

    assert p_value(counts()) > 1e-3
    right = rejection.residual
    try:
        rejection.residual = lambda target, proposal: target / target.sum()
        assert p_value(counts()) < 1e-4
    finally:
        rejection.residual = right


def test_loopspec_composes_in_a_sweep():
    from recdiff.schema import make_plan
    from tests.sweep_helpers import compose_cfg

    plan = make_plan(compose_cfg(["sampler=loopspec", "sampler.r_draft=2", "sampler.r_draft2=4", "sampler.r=16"]))
    assert plan.sampler.params() == {"r": 16, "r_draft": 2, "r_draft2": 4, "init_scale": 0.0, "kv_cache": "per_step"}
    assert json.dumps(plan.sampler.params())
