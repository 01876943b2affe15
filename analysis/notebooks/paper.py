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
# # The paper's figures on the embedded default
# Reads the output folder of `python -m analysis paper` (its `paper.json` names the studies), judges every claim
# again from the data (`analysis/claims.py`) and draws every figure of `report.md`, Table 1 included.

# %% tags=["parameters"]
study = "outputs/paper"   # the output folder of `python -m analysis paper`
out_dir = "outputs/paper/notebooks"
study_name = None         # unused: the folder names its studies

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import polars as pl
from IPython.display import Markdown, display

from analysis.claims import CLAIMS, judge_all
from analysis.paper import load_paper
from analysis.report import plan_figures
from analysis.tables import sampler_table
from analysis.verdicts import count_outcomes

manifest, trials = load_paper(study)
print(f"scale {manifest['scale']}: {len(trials)} recipe studies, {sum(len(t) for t in trials.values())} trials")

# %% [markdown]
# ## Verdicts

# %%
verdicts = judge_all(trials, [c for c in CLAIMS if c.recipe in trials])
print("verdicts:", count_outcomes([v for _, v in verdicts]))
with pl.Config(tbl_rows=-1, fmt_str_lengths=200, tbl_width_chars=250):
    display(pl.DataFrame([{"figure": f"{c.recipe}/{c.figure}", "paper": c.paper, "verdict": v.status,
                           "evidence": v.evidence} for c, v in verdicts]))

# %% [markdown]
# ## Figures

# %%
for claim, verdict in verdicts:
    builders = dict(plan_figures(trials[claim.recipe]))
    if claim.figure not in builders:
        continue
    display(Markdown(f"### {claim.paper}\n*Paper:* {claim.text}  \n*This run:* **{verdict.status}**: "
                     f"{verdict.evidence}"))
    fig = builders[claim.figure]()
    fig.savefig(Path(out_dir) / f"{claim.recipe}-{claim.figure}.png")
    plt.show()

# %% [markdown]
# ## Table 1

# %%
Markdown(sampler_table(trials["table1"]).to_markdown()) if "table1" in trials else "no table1 study"
