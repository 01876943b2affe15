"""Compiled decoding on the retrofitted families (``compile=True`` on a CPU: torch.compile of P, R and C, grouped-query
attention and rotate-half RoPE inside the graphs) gives the eager tokens, batched, with the quick inductor settings
and the cut (tests/matrices.py's ``shallow``) of tests/engine/test_compile.py.

The sampler is static AR, whose compiled programs hold a family's blocks: P, one recurrence per call (chunks of several
are tests/engine/test_compile.py's), C; a prefill's many rows and a step's few. The other samplers' pieces (adaptive's
exit piece, the diffusion step's window and tensor functions, speculative's drafts, LoopSpec's lanes) are
family-independent code around the same blocks, compiled on Huginn's layout by tests/engine/test_compile.py and
tests/engine/test_setting_changes.py's compiled walk (compiling each again per family cost CI about 200 s). So is the
per-step cache layout (the walk: static, adaptive and speculative under per-step caches): its graphs differ from the
shared layout's in the cache writes, which are family-independent code (compiling them again on a family: about 50 s
of a 2-core run)."""

from __future__ import annotations

import pytest

from recdiff import generate, load_model
from tests.matrices import ONE_PER_SAMPLER, prompts, quick_compile, shallow

pytestmark = pytest.mark.slow

FAMILY_GRAPHS = [(s, p) for s, p in ONE_PER_SAMPLER if s == "static"]


def test_compiled_gives_the_eager_tokens(conv_dir, tmp_path):
    small = shallow(conv_dir, tmp_path / conv_dir.name)
    eager = load_model(small)
    compiled = load_model(small, compile=True)
    quick_compile(compiled)
    ps = prompts(small)
    for sampler, params in FAMILY_GRAPHS:
        want = [generate(eager, p, sampler, max_new_tokens=10, stop_token_ids=[], **params).tokens for p in ps]
        got = generate(compiled, ps, sampler, max_new_tokens=10, stop_token_ids=[], batch_size=len(ps), **params)
        assert [r.tokens for r in got] == want, sampler
