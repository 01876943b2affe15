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

from analysis import load_trials, pareto_front, knee, frame_hypervolume, plots, sampler_table
from analysis.report import varying

df = load_trials(study, study_name)
done = df.filter(pl.col("state") == "COMPLETE")
diffusion, baselines = plots.split_baselines(done)
print(f"{len(df)} trials, {len(done)} complete, {len(diffusion)} diffusion")
df.head()

# %% [markdown]
# ## Non-dominated diffusion settings

# %%
front = pareto_front(diffusion)
print("hypervolume w.r.t. (0, 0):", frame_hypervolume(diffusion, (0.0, 0.0)))
print("knee:", {k: v for k, v in (knee(diffusion) or {}).items() if k in ["number", *varying(diffusion), "accuracy", "tokens_per_s"]})
front.select(["number", *varying(diffusion), "accuracy", "tokens_per_s"])

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
