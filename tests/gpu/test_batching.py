"""On CUDA, as on the CPU (tests/engine/test_batching.py): a batch gives every prompt what it gives alone, tokens,
stop reason and statistics, for every sampler, eagerly and replayed from CUDA graphs, with prompts of different
lengths, sequences that stop at different steps and continuous batching. Matrix products over several rows may sum
in another order than over one, so a difference is allowed where it is a logit near-tie
(:func:`tests.gpu.common.check_same`)."""

from __future__ import annotations

import pytest

from tests.gpu.common import check_batch_equals_alone_on_cuda, needs_cuda
from tests.matrices import EVERY_SAMPLER, ids

pytestmark = needs_cuda


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "graphs"])
@pytest.mark.parametrize("sampler, params", EVERY_SAMPLER, ids=ids(EVERY_SAMPLER))
def test_batch_equals_each_prompt_alone_on_cuda(fixture_dir, models, sampler, params, compile):
    check_batch_equals_alone_on_cuda(fixture_dir, models, sampler, params, compile)
