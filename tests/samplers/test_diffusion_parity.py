"""The diffusion sampler against every ``diffusion_*`` case of the reference fixtures.

Documented adapter (``reference_call``): the fixtures come from the authors' code, so the sampler runs with
``adaptive_rule="reference"`` and ``freeze_rule="last"`` (their freezing and δ bookkeeping, see
recdiff/samplers/diffusion.py), and their ``fixed`` mode — which freezes ``num_steps // inner_recurrence + 2``
steps behind the front instead of Algorithm 1's ⌈r/r'⌉ — becomes ``r_freeze = (r // r' + 2) · r'``. Counting:
the reference counts the whole prefill as one core pass over len(prompt) tokens (we count its r core-block calls
and r × len(prompt) positions), credits r recurrences to the first generated position, which the prefill did not
compute, and may return more than max_new_tokens when several positions freeze in the last step.
"""

from __future__ import annotations

import numpy as np
from safetensors.torch import load_file

from recdiff import generate
from tests.conftest import RAVEN_TINY, read_cases


def reference_call(model, prompt, kw, **extra):
    fixed = kw["freeze_strategy"] == "fixed"
    r, r_inner = kw["num_steps"], kw["inner_recurrence"]
    return generate(
        model, prompt, "diffusion", max_new_tokens=kw["max_new_tokens"], r=r, r_inner=r_inner,
        freeze="fixed" if fixed else "adaptive", epsilon=kw["exit_t"], wavefront=kw["max_wavefront"],
        headway=kw["headway"], eta=kw["ema_embeds"], beta=kw["state_noise_mixing"], init_scale=kw["init_scale"],
        continuous_compute=kw["continuous_compute"], beta_schedule="dampened", max_steps=kw["max_diffusion_steps"],
        r_freeze=(r // r_inner + 2) * r_inner if fixed else None, adaptive_rule="reference", freeze_rule="last",
        **extra,
    )


def _diffusion_cases(d):
    prompts, cases = read_cases(d)
    return [(prompts[c["prompt"]], c) for c in cases
            if c["case"].startswith("diffusion") and "reference_raises" not in c]


def test_every_diffusion_case_matches(fixture_dir, fixture_prompt, load_fixture_model):
    model = load_fixture_model(fixture_dir)
    tablets = load_file(fixture_dir / "diffusion_tablets.safetensors")
    cases = [(p, c) for p, c in _diffusion_cases(fixture_dir) if c["prompt"] == fixture_prompt]
    assert cases
    for prompt, c in cases:
        kw, ss, L = c["call_kwargs"], c["summary_scores"], len(prompt)
        r = kw["num_steps"]
        res = reference_call(model, prompt, kw, trace=True)
        st, tr = res.stats, res.trace
        assert res.tokens == c["new_tokens"][: kw["max_new_tokens"]], c["case"]
        assert st["steps"] == ss["diffusion_steps"]
        assert st["core_passes"] - r + 1 == ss["num_core_forward_passes"]
        assert st["tokens_forward"] - r * L + L == ss["num_tokens_forward"]
        assert st["standing_waves"] == ss["num_standing_waves"]
        n = L + len(res.tokens)
        rec = list(st["recurrences_per_position"])
        rec[L] += r  # the reference's prefill credit at the first generated position
        assert rec == ss["recurrence_per_position"][0][:n]
        assert st["stability_per_position"] == ss["token_stable_per_position"][0][:n]
        # tablets: rows = steps (the reference keeps at most 50), columns trimmed to the used extent
        key = f"{c['case']}.{c['prompt']}"
        tok = tablets[f"{key}.token_tablet"].numpy()
        rows, cols = tok.shape
        assert rows == min(ss["diffusion_steps"], 50) == c["analysis"]["tablet_rows_recorded"]
        ours_tok = np.where(tr.tokens < 0, 0, tr.tokens)[:rows]
        ours_tok = np.pad(ours_tok, ((0, 0), (0, max(0, cols - ours_tok.shape[1]))))[:, :cols]
        frozen = np.zeros_like(ours_tok)
        for s in range(rows):
            frozen[s, : tr.frozen[s]] = ours_tok[s, : tr.frozen[s]]
        counter = np.pad(tr.counter[:rows], ((0, 0), (0, max(0, cols - tr.counter.shape[1]))))[:, :cols].copy()
        counter[:, L] += r
        stab = np.pad(tr.stability[:rows], ((0, 0), (0, max(0, cols - tr.stability.shape[1]))))[:, :cols]
        np.testing.assert_array_equal(ours_tok, tok, err_msg=f"{key} token tablet")
        np.testing.assert_array_equal(frozen, tablets[f"{key}.frozen_tablet"].numpy(), err_msg=f"{key} frozen tablet")
        ref_counter = tablets[f"{key}.counter_tablet"].numpy()
        # the reference writes its whole counter row; ours stops at the sequence's current end
        for s in range(rows):
            end = int((tr.tokens[s] >= 0).sum())
            np.testing.assert_array_equal(counter[s, :end], ref_counter[s, :end], err_msg=f"{key} counter row {s}")
        ref_stab = tablets[f"{key}.stability_tablet"].numpy()
        for s in range(rows):
            end = int((tr.tokens[s] >= 0).sum())
            np.testing.assert_array_equal(stab[s, :end], ref_stab[s, :end], err_msg=f"{key} stability row {s}")


def test_fixed_w8_runs_where_the_reference_fails(load_fixture_model):
    """The reference raises on diffusion_fixed_w8 (its cache runs ahead when the cap binds in fixed mode).

    Correct outcome: the cap of 8 positions binds (standing waves), every generated token still gets exactly the
    r_freeze recurrences of fixed mode before it freezes, the schedule (steps, core passes) is the one the cap
    implies, and a cap that never binds (w ≥ 11 here) reproduces the reference's w128 run exactly.
    """
    model = load_fixture_model(RAVEN_TINY)
    prompts, cases = read_cases(RAVEN_TINY)
    w8 = [c for c in cases if c["case"] == "diffusion_fixed_w8"]
    w128 = {c["prompt"]: c for c in cases if c["case"] == "diffusion_fixed_w128"}
    assert w8 and all("reference_raises" in c for c in w8)
    for c in w8:
        prompt, kw = prompts[c["prompt"]], c["call_kwargs"]
        r, r_inner, N = kw["num_steps"], kw["inner_recurrence"], kw["max_new_tokens"]
        r_freeze = (r // r_inner + 2) * r_inner  # 40: ten steps per position
        res = reference_call(model, prompt, kw, trace=True)
        assert len(res.tokens) == N and not res.stats["max_steps_reached"]
        assert res.stats["standing_waves"] > 0
        # wavefront never wider than the cap: unfrozen states = proposals beyond the frozen prefix
        widths = (res.trace.tokens >= 0).sum(1) - res.trace.frozen + 1
        assert widths.max() <= kw["max_wavefront"] + 1
        # every new token's state got exactly r_freeze sampler recurrences before it froze
        L = len(prompt)
        per_pos = np.array(res.stats["recurrences_per_position"][L : L + N - 1])
        assert (per_pos == r_freeze).all()
        # schedule, independent of the tokens in fixed mode: state L+i enters when a slot is free and freezes after
        # 10 steps. States L … L+7 enter at steps 0 … 7 and freeze at steps 9 … 16; afterwards a state can only enter
        # one step after the state 8 places before it froze, so f(i) = f(i-8) + 11. The 23 freezes after the
        # prefill's token end with f(22) = f(14) + 11 = f(6) + 22 = 37: 38 steps.
        steps = res.stats["steps"]
        assert steps == 38
        assert res.stats["core_passes"] == r + steps * r_inner
        # the same run without a binding cap equals the reference's w128 output
        wide = reference_call(model, prompt, {**kw, "max_wavefront": 11})
        assert wide.tokens == w128[c["prompt"]]["new_tokens"][:N]
        assert steps > w128[c["prompt"]]["summary_scores"]["diffusion_steps"]
