"""recdiff analysis: Optuna studies → tidy tables, Pareto sets, the paper's figures and tables."""
from analysis.load import load_samples, load_trace, load_trials, resolve
from analysis.pareto import (
                             dominates,
                             frame_hypervolume,
                             hypervolume,
                             hypervolume_interval,
                             knee,
                             knee_index,
                             noisy_dominates,
                             noisy_pareto_front,
                             noisy_pareto_mask,
                             pareto_front,
                             pareto_mask,
                             with_noisy_pareto,
                             with_pareto,
)
from analysis.plots import plot_cache_sharing, plot_heatmap, plot_pareto, plot_tradeoff
from analysis.reference import reference_trials
from analysis.speedup import format_speedup, speedup_table
from analysis.tables import sampler_table
from analysis.trace_plots import plot_latent_change, plot_position_stability, plot_token_trace, position_stats

__all__ = [
    "load_samples", "load_trace", "load_trials", "resolve",
    "dominates", "frame_hypervolume", "hypervolume", "knee", "knee_index", "pareto_front", "pareto_mask",
    "with_pareto", "hypervolume_interval", "noisy_dominates", "noisy_pareto_front", "noisy_pareto_mask",
    "with_noisy_pareto",
    "plot_cache_sharing", "plot_heatmap", "plot_latent_change", "plot_pareto", "plot_position_stability",
    "plot_token_trace", "plot_tradeoff", "position_stats",
    "sampler_table", "speedup_table", "format_speedup", "reference_trials",
]
