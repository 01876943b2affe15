"""Per-trial artifacts for the Optuna dashboard: the token-stability picture of a diffusion trace, and its LoopSpec
counterpart, which readout was right at each committed token.

The stability picture follows the paper's qualitative figures: token ids of the sequence (columns = generated
positions) as they change over sampler steps (rows), next to the relative latent change δ per position.
The ``analysis`` package draws the publication version; this one only has to be readable in the dashboard. The
readouts picture is one strip per problem, committed tokens along x, coloured by the readout whose proposal the
full-depth readout committed (:func:`draw_readouts`, which the analysis draws too).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

READOUTS = ("neither", "q1", "q2")                     # LoopSpec's ``accepted`` values 0, 1, 2, by name
READOUT_COLOURS = ("#c44e52", "#55a868", "#4c72b0")   # neither red, q1 green, q2 blue
READOUT_PROBLEMS = 32                                  # strips drawn for the dashboard (the slice's first problems)


def load_trace_arrays(path: str | Path) -> dict[str, Any]:
    """The fields of a saved ``DiffusionTrace`` (docs/architecture.md) as numpy arrays."""
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def plot_stability(trace_path: str | Path, png_path: str | Path, tokenizer: Any = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = load_trace_arrays(trace_path)
    start = int(np.asarray(t.get("prompt_len", 0)))
    tokens = np.asarray(t["tokens"])[:, start:]
    delta = np.asarray(t["delta"], dtype=np.float32)[:, start:] if "delta" in t else None
    frozen = np.asarray(t["frozen"]) - start if "frozen" in t else None

    fig, axes = plt.subplots(1, 2 if delta is not None else 1, figsize=(11, 4.5), squeeze=False)
    ax = axes[0, 0]
    ax.imshow(np.ma.masked_less(tokens, 0), aspect="auto", interpolation="nearest", cmap="tab20")
    if frozen is not None:
        ax.plot(frozen - 0.5, np.arange(len(frozen)), color="white", lw=1.2, label="frozen")
    ax.set(xlabel="generated position", ylabel="sampler step", title="token ids")
    if delta is not None:
        ax = axes[0, 1]
        with np.errstate(divide="ignore", invalid="ignore"):
            img = ax.imshow(np.log10(delta), aspect="auto", interpolation="nearest", cmap="magma_r")
        fig.colorbar(img, ax=ax, label="log10 relative latent change δ")
        ax.set(xlabel="generated position", ylabel="sampler step", title="latent change")
    fig.tight_layout()
    png_path = Path(png_path)
    fig.savefig(png_path, dpi=90)
    plt.close(fig)
    return png_path


def readout_matrix(accepted: Sequence[Sequence[int]]) -> np.ma.MaskedArray:
    """(problems, tokens): which readout was right at each committed token after the first (0 neither, 1 q1, 2 q2),
    masked past each problem's last token."""
    grid = np.full((len(accepted), max((len(a) for a in accepted), default=0)), -1, dtype=np.int64)
    for i, a in enumerate(accepted):
        grid[i, :len(a)] = a
    return np.ma.masked_less(grid, 0)


def draw_readouts(ax: Any, accepted: Sequence[Sequence[int]], labels: Sequence[str] | None = None) -> Any:
    """One strip per problem on ``ax``: ``ax.images[0]`` holds :func:`readout_matrix`; the legend names the colours."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    img = ax.imshow(readout_matrix(accepted), aspect="auto", interpolation="nearest",
                    cmap=ListedColormap(READOUT_COLOURS), vmin=-0.5, vmax=len(READOUTS) - 0.5)
    ax.set(xlabel="committed token (after the first)", ylabel="problem")
    if labels is not None:
        ax.set_yticks(range(len(labels)), [str(x) for x in labels], fontsize=6)
    ax.legend(handles=[Patch(color=c, label=f"{n} right") for n, c in zip(READOUTS, READOUT_COLOURS)],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
    return img


def plot_readouts(accepted: Sequence[Sequence[int]], png_path: str | Path, labels: Sequence[str] | None = None,
                  max_problems: int = READOUT_PROBLEMS) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = list(accepted)[:max_problems]
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.16 * max(len(shown), 4)))
    draw_readouts(ax, shown, None if labels is None else list(labels)[:max_problems])
    ax.set_title("LoopSpec: which readout's proposal was committed")
    fig.tight_layout()
    png_path = Path(png_path)
    fig.savefig(png_path, dpi=90)
    plt.close(fig)
    return png_path
