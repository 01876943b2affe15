"""The sampler matrices and prompt sets that several test files run (CPU engine tests and tests/gpu alike): one
place, so that a configuration added here is checked by every file that runs the matrix. Plain data and two small
helpers; nothing here is a test. tests/gpu imports it too, so it needs nothing beyond recdiff (no hydra)."""

from __future__ import annotations

import json
from pathlib import Path

# One configuration per sampler, for the files where a configuration is expensive (compiling, bf16, CUDA-graph
# captures): the diffusion row exercises adaptive freezing, headway and momentum, and its width changes from step to
# step; the loopspec row's second readout puts lanes on branches of their own. The diffusion row stays last (the
# warm-up tests take it). r' = 4 (the paper's default) runs its inner recurrences in one compiled call, the graph a
# full-slot prefill uses too.
ONE_PER_SAMPLER = [
    ("static", {"r": 6}),
    ("adaptive", {"r": 8, "epsilon": 0.05}),
    ("speculative", {"r": 6, "r_draft": 2, "lookahead": 3}),
    ("loopspec", {"r": 6, "r_draft": 2, "r_draft2": 4}),
    ("diffusion", {"r": 8, "r_inner": 4, "epsilon": 0.05, "headway": 2, "eta": 0.2}),
]

# Every sampler, both KV-cache layouts, and the diffusion sampler with both adaptive rules, both freeze rules,
# headway, noise and random initial states: the matrix of batch = alone (CPU and GPU) and of graphs against eager.
EVERY_SAMPLER = [
    ("static", {"r": 8}),
    ("static", {"r": 4, "kv_cache": "per_step"}),
    ("adaptive", {"r": 16, "epsilon": 0.05}),
    ("adaptive", {"r": 16, "epsilon": 0.05, "kv_cache": "per_step", "exit_in_prefill": False}),
    ("speculative", {"r": 8, "r_draft": 2, "lookahead": 3}),
    ("loopspec", {"r": 8, "r_draft": 2, "r_draft2": 4, "init_scale": 0.5}),
    ("diffusion", {"r": 8, "r_inner": 2, "freeze": "fixed"}),
    ("diffusion", {"r": 16, "r_inner": 4, "epsilon": 0.05, "wavefront": 24}),
    ("diffusion", {"r": 16, "r_inner": 4, "epsilon": 0.05, "wavefront": 24, "adaptive_rule": "reference",
                   "freeze_rule": "last"}),
    ("diffusion", {"r": 8, "r_inner": 2, "epsilon": 0.05, "wavefront": 6, "headway": 2, "beta": 0.3,
                   "init_scale": 0.5, "eta": 0.2, "continuous_compute": True}),
]

# the compile tests' inductor settings (engine_options["inductor"]: overrides of recdiff.engine.program.PATCHES):
# Python wrapper, no GEMM autotuning, weights as graph inputs, scalar C++ (tests/engine/test_compile.py says why)
QUICK = {"cpp_wrapper": False, "max_autotune": False, "freezing": False, "cpp.vec_isa_ok": False}


def quick_compile(model, chunk: int = 1):
    """``model`` set to compile as the compile tests do: :data:`QUICK` inductor settings, and ``chunk`` recurrences
    per compiled call instead of the engine's four (``engine_options["chunk"]``, read when a runner is made: the same
    piece, a loop over its recurrences). One by default, a third less compile time than two (static and LoopSpec
    compiled cold on 2 cores: 181 → 130 s); tests/engine/test_compile.py compiles chunks of two, the loop inside a
    graph, for the samplers of the shared-cache runner."""
    model.engine_options["inductor"] = QUICK
    model.engine_options["chunk"] = chunk
    return model

# new tokens per prompt of batch_prompts(): sequences that end at different steps of one batch
LIMITS = [16, 9, 20, 5, 12, 1, 14]


def ids(configs: list[tuple[str, dict]]) -> list[str]:
    """Test ids of a matrix: the sampler and the row's index (one sampler has several rows)."""
    return [f"{s}-{i}" for i, (s, _) in enumerate(configs)]


def prompts(d: Path, n: int | None = None) -> list[list[int]]:
    """The fixture's two prompts, a prefix and their concatenation; with ``n``: ``n`` prompts of 3 to 19 tokens."""
    base = list(json.loads((d / "prompts.json").read_text()).values())
    out = [base[0], base[1], base[0][:4], base[0] + base[1]]
    return out if n is None else [(base[i % 2] * 4)[: 3 + i % 17] for i in range(n)]


def batch_prompts(d: Path) -> list[list[int]]:
    """The fixture's prompts plus prefixes and a concatenation of them: lengths from 3 to 19 tokens."""
    a, b = list(json.loads((d / "prompts.json").read_text()).values())[:2]
    return [a, b, a[:3], b[:5], a + b, a[:9], b[2:]]


def stop_token(model, prompts: list[list[int]], limits: list[int], sampler: str, params: dict) -> int:
    """A token that some sequences produce within their limit and others do not, so that in the batch some stop
    on it and others at their length limit."""
    from recdiff import generate

    runs = [generate(model, p, sampler, max_new_tokens=n, stop_token_ids=[], **params).tokens
            for p, n in zip(prompts, limits)]
    counts = {t: sum(t in r for r in runs) for r in runs for t in r}
    return max(counts, key=lambda t: (counts[t] < len(runs), counts[t]))


def shallow(src: Path, out: Path) -> Path:
    """``src`` cut to one block in P, two in R and one in C (the first ones), saved to ``out`` with its prompts: the
    same architecture and pieces for the tests whose cost is compiling them (dynamo's tracing and inductor's lowering
    grow with the blocks a graph holds). Which pieces and specialisations are compiled does not depend on the block
    count; two blocks in R keep a graph writing several cache slots, and C's slot still follows P's and R's."""
    import re

    from safetensors.torch import load_file, save_file

    config = json.loads((src / "config.json").read_text())
    core = min(2, config["n_layers_in_recurrent_block"])
    config.update(n_layers_in_prelude=1, n_layers_in_recurrent_block=core, n_layers_in_coda=1, n_layers=core + 2)
    dropped = re.compile(rf"transformer\.((prelude|coda)\.[1-9]|core_block\.([{core}-9]|[1-9]\d))")
    weights = {k: v for k, v in load_file(src / "model.safetensors").items() if not dropped.match(k)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "prompts.json").write_text((src / "prompts.json").read_text())
    return out
