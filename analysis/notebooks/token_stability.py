# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Token stability of the diffusion sampler
# Token ids over sampler steps × positions with the frozen front, latent change, and per-position
# stability for the traced trials of a study (fig:qualitative_examples, fig:token_stability).

# %% tags=["parameters"]
study = "outputs/optuna/journal.log"
out_dir = "outputs/notebooks"
study_name = None
max_traces = 3

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import polars as pl

from analysis import load_trials, position_stats, trace_plots

df = load_trials(study, study_name)
traces = [(row["number"], p) for row in df.filter(pl.col("state") == "COMPLETE").iter_rows(named=True)
          for p in (row["trace_paths"] or [])[:1] if p and Path(p).is_file()][:max_traces]
print(f"{len(traces)} traced trials")

# %%
for number, path in traces:
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), layout="constrained")
    trace_plots.plot_token_trace(path, ax=axes[0])
    trace_plots.plot_latent_change(path, ax=axes[1])
    trace_plots.plot_position_stability(path, ax=axes[2])
    fig.suptitle(f"trial {number}")
    fig.savefig(Path(out_dir) / f"token_stability_{number}.png")
    plt.show()

# %%
position_stats(traces[0][1]).head(20) if traces else "no traces in this study"
