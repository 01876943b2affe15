"""On CUDA, as on the CPU (tests/engine/test_batching.py): a batch gives every prompt what it gives alone, tokens,
stop reason and statistics, for every sampler, eagerly and replayed from CUDA graphs, with prompts of different
lengths, sequences that stop at different steps and continuous batching. Matrix products over several rows may sum
in another order than over one, so a difference is allowed where it is a logit near-tie
(:func:`tests.gpu.common.check_same`)."""

from __future__ import annotations

import pytest

from recdiff import generate
from tests.gpu.common import check_same, needs_cuda
from tests.matrices import EVERY_SAMPLER, LIMITS, batch_prompts, ids, stop_token

pytestmark = needs_cuda


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "graphs"])
@pytest.mark.parametrize("sampler, params", EVERY_SAMPLER, ids=ids(EVERY_SAMPLER))
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
