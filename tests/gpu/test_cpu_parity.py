"""fp32 with TF32 off: on CUDA every sampler gives the CPU's greedy tokens and statistics on the reference fixtures
(raven_tiny and perturbed/), exactly, or where a sequence differs, its first differing token is a logit near-tie
(:func:`tests.gpu.common.check_same`).

Only for configurations that draw no random numbers: α > 0 (random initial states) and β > 0 (noise) draw from the
sequence's own generator on the model's device, and torch's CPU and CUDA generators give different streams for the
same seed (measured on an H200: the one such configuration gave other exits and first tokens on CUDA). A seeded run is
reproducible on its device (graphs against eager and batch against alone, tests/gpu/test_cuda_graphs.py and
test_batching.py, cover those configurations), not across devices."""

from __future__ import annotations

import pytest

from recdiff import generate
from tests.gpu.common import check_same, needs_cuda
from tests.matrices import EVERY_SAMPLER, LIMITS, batch_prompts

pytestmark = needs_cuda

DETERMINISTIC = [(i, s, p) for i, (s, p) in enumerate(EVERY_SAMPLER) if not p.get("init_scale") and not p.get("beta")]
assert len(DETERMINISTIC) < len(EVERY_SAMPLER)  # the filter is the documented exception, not every config


@pytest.mark.parametrize("sampler, params", [c[1:] for c in DETERMINISTIC],
                         ids=[f"{s}-{i}" for i, s, _ in DETERMINISTIC])
def test_cuda_fp32_gives_the_cpu_tokens_and_stats(fixture_dir, models, sampler, params):
    cpu, gpu = models(fixture_dir, "cpu"), models(fixture_dir, "cuda")
    prompts = batch_prompts(fixture_dir)
    kw = dict(stop_token_ids=[], **params)
    want = [generate(cpu, p, sampler, max_new_tokens=n, **kw) for p, n in zip(prompts, LIMITS)]
    got = [generate(gpu, p, sampler, max_new_tokens=n, **kw) for p, n in zip(prompts, LIMITS)]
    check_same(cpu, prompts, want, got, params["r"], f"{fixture_dir.name} {sampler} {params}: CUDA against CPU")
