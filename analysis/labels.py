"""One mapping from column key to the paper's symbol, used for every axis, legend and table."""
from __future__ import annotations

from typing import Any

from recdiff.params import declarations

# Sampler keys in docs/architecture.md order; every trials table carries all of them.
SAMPLER_KEYS: tuple[str, ...] = (
    "r_inner", "beta", "beta_schedule", "eta", "epsilon", "wavefront", "headway", "init_scale",
    "continuous_compute", "freeze", "r", "kv_cache", "r_draft", "r_draft2", "lookahead", "max_steps",
)
OBJECTIVES: tuple[str, ...] = ("accuracy", "tokens_per_s")
DIRECTIONS: tuple[str, ...] = ("maximize", "maximize")
BASELINES: tuple[str, ...] = ("static", "adaptive", "speculative", "loopspec")

# The samplers' parameters label themselves (recdiff/params.py: the symbol, or a short name where the paper has none).
LABELS: dict[str, str] = {
    **{key: p.plot_label(key) for key, p in declarations().items()},
    "sampler": "sampler",
    "benchmark": "benchmark",
    "accuracy": "accuracy",
    "tokens_per_s": "tokens/s",
    "kv_cache_bytes": "KV cache memory",
    "peak_memory_bytes": "peak memory",
    "core_passes_per_token": "core passes / token",
}

SAMPLER_NAMES: dict[str, str] = {
    "static": "Static AR",
    "adaptive": "Adaptive Compute AR",
    "speculative": "Speculative Decoding AR",
    "diffusion": "Diff. Sampler",
    "loopspec": "LoopSpec",
}


def label(key: str) -> str:
    """Axis/legend label for a column key (the key itself when the paper has no symbol)."""
    return LABELS.get(key, key)


def fmt_value(value: Any) -> str:
    """Compact value text: 0.20 → '0.2', 4.0 → '4', True → 'on'."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def setting(key: str, value: Any) -> str:
    """'r′=4', 'β_t=0.2' — one parameter setting as shown in legends and tables."""
    return f"{label(key)}={fmt_value(value)}"

# LaTeX symbols for the same keys (Table 1 row labels are typeset as in the paper).
LATEX_LABELS: dict[str, str] = {key: p.latex for key, p in declarations().items() if p.latex}

BENCHMARK_NAMES: dict[str, str] = {
    "gsm8k": "GSM8K", "math500": "MATH500", "humaneval": "HumanEval", "mbpp": "MBPP",
    "minerva_math": "Minerva Math", "arith": "Arith", "compose": "Compose",
}


def benchmark_name(key: Any) -> str:
    return BENCHMARK_NAMES.get(str(key).lower(), str(key)) if key is not None else "—"
