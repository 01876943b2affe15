"""bf16 (weights, activations and cache; norms, RoPE, softmax, logits and δ in float32) replayed from CUDA graphs
agrees with float32 on at least 90% of greedy positions, for every sampler, batched."""

from __future__ import annotations

from recdiff import generate
from tests.conftest import RAVEN_TINY, need_fixtures
from tests.gpu.common import needs_cuda
from tests.matrices import ONE_PER_SAMPLER, prompts

pytestmark = needs_cuda


def test_bf16_graphs_agree_with_fp32_on_90_percent_of_positions(models):
    fp32 = models(need_fixtures(), "cuda")
    bf16 = models(RAVEN_TINY, "cuda", dtype="bfloat16", compile=True)
    ps = prompts(RAVEN_TINY)
    same = total = 0
    for sampler, params in ONE_PER_SAMPLER:
        want = generate(fp32, ps, sampler, max_new_tokens=10, stop_token_ids=[], batch_size=len(ps), **params)
        got = generate(bf16, ps, sampler, max_new_tokens=10, stop_token_ids=[], batch_size=len(ps), **params)
        for a, b in zip(want, got):
            assert len(b.tokens) == len(a.tokens)
            same += sum(x == y for x, y in zip(a.tokens, b.tokens))
            total += len(a.tokens)
    print(f"bf16 agrees with fp32 on {same}/{total} greedy positions")
    assert same / total >= 0.9, f"bf16 agrees with fp32 on {same}/{total} positions"
