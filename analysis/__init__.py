"""recdiff analysis: Optuna studies → tidy tables, Pareto sets, the paper's figures and tables.

The names below are loaded from their modules on first use (PEP 562): a sweep's closing table imports
``analysis.trials`` and ``analysis.speedup`` without matplotlib and scipy.stats, a second or more of every sweep's run.
"""
from __future__ import annotations

import importlib
from typing import Any

_HOME = {
    "analysis.trials": ["load_samples", "load_trace", "load_trials", "resolve"],
    "analysis.pareto": ["dominates", "frame_hypervolume", "hypervolume", "hypervolume_interval", "knee", "knee_index",
                        "noisy_dominates", "noisy_pareto_front", "noisy_pareto_mask", "pareto_front", "pareto_mask",
                        "with_noisy_pareto", "with_pareto"],
    "analysis.plots": ["plot_cache_sharing", "plot_heatmap", "plot_pareto", "plot_tradeoff"],
    "analysis.reference": ["reference_trials"],
    "analysis.speedup": ["format_speedup", "speedup_table"],
    "analysis.tables": ["sampler_table"],
    "analysis.trace_plots": ["plot_latent_change", "plot_position_stability", "plot_token_trace", "position_stats"],
}
_MODULE = {name: module for module, names in _HOME.items() for name in names}
__all__ = list(_MODULE)


def __getattr__(name: str) -> Any:
    if name not in _MODULE:
        raise AttributeError(f"module 'analysis' has no attribute {name!r}")
    value = getattr(importlib.import_module(_MODULE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
