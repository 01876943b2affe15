"""Per-trial artifacts for the Optuna dashboard: the token-stability picture of a diffusion trace.

The picture follows the paper's qualitative figures: token ids of the sequence (columns = generated
positions) as they change over sampler steps (rows), next to the relative latent change δ per position.
The ``analysis`` package draws the publication version; this one only has to be readable in the dashboard.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


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
