"""On CUDA, as on the CPU (tests/engine/test_batching.py): a batch gives every prompt what it gives alone, tokens,
stop reason and statistics, for every sampler, eagerly and replayed from CUDA graphs, with prompts of different
lengths, sequences that stop at different steps and continuous batching. Matrix products over several rows may sum
in another order than over one, so a difference is allowed where it is a logit near-tie
(:func:`tests.gpu.common.check_same`)."""

from __future__ import annotations

import pytest

from recdiff import generate
from tests.engine.test_batching import CONFIGS, batch_prompts, stop_token
from tests.gpu.common import check_same, needs_cuda

pytestmark = needs_cuda

LIMITS = [16, 9, 20, 5, 12, 1, 14]


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "graphs"])
@pytest.mark.parametrize("sampler, params", CONFIGS, ids=[f"{s}-{i}" for i, (s, _) in enumerate(CONFIGS)])
def test_batch_equals_each_prompt_alone_on_cuda(fixture_dir, models, sampler, params, compile):
    model = models(fixture_dir, "cuda", compile=compile)
    prompts = batch_prompts(fixture_dir)
    stop = stop_token(model, prompts, LIMITS, sampler, params)
    alone = [generate(model, p, sampler, max_new_tokens=n, stop_token_ids=[stop], **params)
             for p, n in zip(prompts, LIMITS)]
    assert len({len(r.tokens) for r in alone}) > 2  # the sequences really end at different steps
    for batch_size in (3, len(prompts)):
        together = generate(model, prompts, sampler, max_new_tokens=LIMITS, stop_token_ids=[stop],
                            batch_size=batch_size, **params)
        check_same(model, prompts, alone, together, params["r"],
                   f"{fixture_dir.name} {sampler} {params} {'graphs' if compile else 'eager'}: B={batch_size} "
                   "against alone")
