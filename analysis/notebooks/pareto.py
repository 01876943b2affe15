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
# # Accuracy–throughput Pareto analysis
# The study's trials as a tidy table, the non-dominated diffusion settings, the knee, and the
# paper's Pareto plot (fig:pareto), heatmaps (fig:heatmap) and Table 1 (tab:sampler_comparison).

# %% tags=["parameters"]
study = "outputs/optuna/journal.log"  # storage URL, journal/SQLite file, sweep output dir or study name
out_dir = "outputs/notebooks"
study_name = None

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import polars as pl

from analysis import hypervolume_interval, knee, load_trials, noisy_pareto_front, pareto_front, plots, sampler_table
from analysis.report import varying

df = load_trials(study, study_name)
done = df.filter(pl.col("state") == "COMPLETE")
diffusion, baselines = plots.split_baselines(done)
print(f"{len(df)} trials, {len(done)} complete, {len(diffusion)} diffusion")
df.head()

# %% [markdown]
# ## Non-dominated diffusion settings

# %%
# one trial dominates another only when better on both axes beyond their 95% intervals; the others tie
front = noisy_pareto_front(diffusion)
print(f"{len(front)} not dominated beyond the intervals, {len(pareto_front(diffusion))} by the measured values alone")
print("hypervolume w.r.t. (0, 0) [ends of the intervals]:",
      hypervolume_interval(diffusion, (0.0, 0.0), missing="point"))
print("knee:", {k: v for k, v in (knee(diffusion) or {}).items()
                if k in ["number", *varying(diffusion), "accuracy", "tokens_per_s"]})
front.select([c for c in ["number", *varying(diffusion), "accuracy", "accuracy_lo", "accuracy_hi", "tokens_per_s",
                          "tokens_per_s_lo", "tokens_per_s_hi", "speedup", "speedup_lo", "speedup_hi"]
              if c in front.columns])

# %%
ax = plots.plot_pareto(done)
ax.figure.savefig(Path(out_dir) / "pareto.png")
plt.show()

# %%
if {"r_inner", "beta"} <= set(varying(diffusion)):
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), layout="constrained")
    plots.plot_heatmap(diffusion, "accuracy", ax=axes[0])
    plots.plot_heatmap(diffusion, "tokens_per_s", ax=axes[1])
    plt.show()

# %% [markdown]
# ## Table 1

# %%
from IPython.display import Markdown

Markdown(sampler_table(done).to_markdown())
