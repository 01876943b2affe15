"""``python -m recdiff.bench`` (a script that prints figures; nothing here is timed): the stacked matrices of its
product floor are one recurrence's, the bytes of its bandwidth bound are counted as by hand, and a small run prints
every section."""

from __future__ import annotations

import pytest
import torch

from recdiff import generate
from recdiff.engine.runner import Runner
from recdiff.model import RecurrentDepthModel
from recdiff.model_config import RecurrentConfig
from recdiff.tools.bounds import model_calls, read_bytes, recurrence_matrices, result_bytes, weight_bytes
from recdiff.tools.speed import SHAPES, build, main


def test_floor_multiplies_exactly_one_recurrences_weights():
    model = build("embedded", "cpu", None)
    t = model.transformer
    own = [t.adapter.weight] + [p for p in t.core_block.parameters() if p.dim() == 2]
    stacked = recurrence_matrices(model)
    assert len(stacked) == len({w.shape[1] for w in own}) == 3  # E (qkv, proj, fc), 2E (adapter), I (mlp.proj)
    assert sum(w.numel() for w in stacked) == sum(w.numel() for w in own)
    x = {w.shape[1]: torch.randn(2, w.shape[1]) for w in own}
    got = torch.cat([x[w.shape[1]] @ w.T for w in stacked], 1)
    want = torch.cat([torch.cat([x[w.shape[1]] @ w.T for w in own if w.shape[1] == width], 1)
                      for width in dict.fromkeys(w.shape[1] for w in own)], 1)
    torch.testing.assert_close(got, want)


def test_bench_prints_loopspecs_rows_and_their_ratio(capsys):
    main(["--models", "embedded", "--samplers", "static r=32,loopspec K=4,loopspec K=4 X=2", "--prompts", "1",
          "--max-new-tokens", "4", "--modes", "batch-1 eager", "--repeats", "2"])
    out = capsys.readouterr().out
    rows = {line[:24].strip(): line.split() for line in out.splitlines() if line.startswith("loopspec K=4")}
    assert set(rows) == {"loopspec K=4", "loopspec K=4 X=2"}
    # every committed token went through all r=32 recurrences in some lane (and dropped lanes cost more): ≥ 32 per token
    assert all(float(r[-2]) >= 32 for r in rows.values())
    assert "ratio loopspec K=4 / static r=32 — batch-1 eager:" in out
    assert "ratio loopspec K=4 X=2 / static r=32 — batch-1 eager:" in out


@pytest.mark.slow
def test_bench_prints_rates_costs_ratios_and_the_step_profile(capsys):
    main(["--models", "embedded", "--samplers", "static r=32,diffusion defaults", "--prompts", "1",
          "--max-new-tokens", "4", "--modes", "batch-1 eager", "--profile"])
    out = capsys.readouterr().out
    assert "static r=32" in out and "diffusion defaults" in out
    assert "cost per core row·recurrence" in out and "256 rows:" in out
    assert "ratio diffusion defaults / static r=32 — batch-1 eager:" in out
    assert "% bound" not in out  # the bandwidth bound is a GPU figure: off on a CPU unless asked for
    rows = {line.split("  ")[0]: line.split() for line in out.splitlines() if " batch-1 eager " in line and "%" in line}
    static, diffusion = rows["static r=32"], rows["diffusion defaults"]
    # steps timed: static decodes 3 of its 4 tokens (the prefill gives the first), one read each; diffusion at least 3
    assert int(static[4]) == 3 and float(static[-1]) == 1.0
    assert int(diffusion[4]) >= 3 and float(diffusion[-1]) == 1.0
    assert "bookkeeping-free bound, batch-1 eager: static r=32" in out and "% of the bound" in out


@pytest.mark.slow
def test_bench_prints_the_bandwidth_bound_when_asked(capsys):
    main(["--models", "random-small", "--samplers", "static r=8", "--prompts", "1", "--max-new-tokens", "2",
          "--modes", "batch-1 eager", "--bound"])
    out = capsys.readouterr().out
    assert "bandwidth: a cpu copy of 0.25 GiB moves" in out and "GB per token" in out
    row = next(line for line in out.splitlines() if line.startswith("static r=8") and line.endswith("%"))
    gb_call, calls_s, frac = row.split()[-3:]
    assert float(gb_call) > 0 and float(calls_s) > 0 and float(frac.rstrip("%")) > 0


def tiny_model() -> RecurrentDepthModel:
    """Width 8, 2 heads of 4, one layer each in P, R and C, MLP 16, vocabulary 32, tied head, float32."""
    return RecurrentDepthModel(RecurrentConfig(n_embd=8, n_heads=2, n_layers_in_prelude=1,
                                               n_layers_in_recurrent_block=1, n_layers_in_coda=1, intermediate_size=16,
                                               vocab_size=32, block_size=64))


def test_bytes_a_call_must_read_by_hand():
    # one sandwich block: Wqkv 8·24 + qk_bias 2·2·4 + proj 8·8 + 4 norms 4·8 + fc 8·32 + mlp proj 16·8 = 688 floats
    rb = read_bytes(tiny_model())
    assert rb.prelude == 688 * 4
    assert rb.core == (688 + 16 * 8) * 4  # + the adapter, 2E → E
    assert rb.coda == (688 + 8 + 32 * 8) * 4  # + ln_f and the (tied) head's whole matrix
    assert rb.kv == 2 * 2 * 4 * 4 and rb.layers == (1, 1, 1)  # K and V of 2 heads × 4 floats
    assert rb.call(2, keys=5) == (688 + 952 + 2 * 816) * 4 + (1 + 1 + 2) * 5 * 64


def test_bytes_a_run_must_read_by_hand():
    """Static r=2, a prompt of 3 and 2 new tokens: two calls (the prefill gives the first token), 4 recurrences;
    each call's attention reads the prompt and half the new tokens, 4 positions, in 2 + 4 layer passes."""
    model = tiny_model()
    res = generate(model, [1, 2, 3], "static", r=2, max_new_tokens=2, stop_token_ids=[])
    assert res.stats["steps"] == 2 and res.stats["core_passes"] == 4
    rb = read_bytes(model)
    weights = 2 * (688 + 952) * 4 + 4 * 816 * 4
    kv = (2 * 2 + 4 * 1) * 4 * 64
    assert result_bytes(rb, [res], [3], "static", {"r": 2}) == weights + kv == 28224
    # two such sequences decoded together read the weights once for both, their K/V each
    assert result_bytes(rb, [res, res], [3, 3], "static", {"r": 2}, batch=2) == weights + 2 * kv
    # the calls of the other samplers: diffusion's prefill and steps, speculative's drafts and verifications
    assert model_calls("diffusion", {"steps": 7}, {}) == 8
    assert model_calls("speculative", {"rounds": 3}, {"lookahead": 4}) == 1 + 3 * 5
    assert model_calls("adaptive", {"steps": 5}, {}) == 5


def test_loopspec_reads_the_cores_weights_once_per_core_call_for_all_lanes():
    """r=8, r_draft=2, 6 cycles: 7 calls read C; R is read 8 times in the prefill and twice per cycle, however many
    lanes a cycle runs; P in the prefill and in the cycles that start a lane, all but the last r/K − 1 = 3."""
    rb = read_bytes(tiny_model())
    stats = {"steps": 6, "core_passes": 8 + 2 * 19}   # 19 lane·cycles: the lanes' recurrences are not weight reads
    params = {"r": 8, "r_draft": 2}
    assert model_calls("loopspec", stats, params) == 7
    assert weight_bytes(rb, "loopspec", stats, params) == (4 * 688 + 7 * 952 + 20 * 816) * 4
    # the K/V every lane's recurrence reads: 7 calls' P and C passes, 46 recurrences, at 3 + 4/2 positions
    res = type("R", (), {"stats": stats, "tokens": [0] * 4})()
    assert result_bytes(rb, [res], [3], "loopspec", params) == (4 * 688 + 7 * 952 + 20 * 816) * 4 + \
        (7 * 2 + 46) * 5 * 64


def test_loopspec_bytes_are_a_lower_bound_of_what_its_calls_read(monkeypatch):
    """Counted on a real run: P, C and R weight reads by the runner's calls (prefill included) are never fewer than
    the bound counts, R's exactly as many."""
    model, reads = tiny_model(), {"P": 1, "C": 0, "R": 8}        # the prefill's P and its r=8 recurrences
    calls = {"lane_embed": ("P", lambda a, kw: 1), "lane_decode": ("C", lambda a, kw: 1),
             "decode": ("C", lambda a, kw: 1), "lane_cores": ("R", lambda a, kw: a[-1])}
    for name, (part, n) in calls.items():
        def counted(self, *a, _orig=getattr(Runner, name), _part=part, _n=n, **kw):
            reads[_part] += _n(a, kw)
            return _orig(self, *a, **kw)
        monkeypatch.setattr(Runner, name, counted)
    params = {"r": 8, "r_draft": 2, "r_draft2": 4}
    res = generate(model, [1, 2, 3], "loopspec", max_new_tokens=12, stop_token_ids=[], **params)
    assert res.stats["steps"] > 0 and res.stats["peak_lanes"] > 1
    rb = read_bytes(model)
    read = reads["P"] * rb.prelude + reads["C"] * rb.coda + reads["R"] * rb.core
    assert weight_bytes(rb, "loopspec", res.stats, params) <= read
    assert reads["R"] == 8 + 2 * res.stats["steps"]


def test_huginn_reads_the_issues_bytes_per_token_and_step():
    """Huginn-0125 in bf16 (on the meta device): ~109 GB per static r=32 token, ~17 GB per diffusion step at r'=4."""
    with torch.device("meta"):
        model = RecurrentDepthModel(RecurrentConfig(**SHAPES["huginn"])).to(torch.bfloat16)
    rb = read_bytes(model)
    assert 108e9 < rb.call(32) < 109e9
    assert 16.8e9 < rb.call(4) < 17.1e9
    assert rb.kv == 2 * 5280 * 2  # K and V, 55 heads of 96, bf16
