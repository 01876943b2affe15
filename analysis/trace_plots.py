"""Figures of one diffusion trace (token-stability pictures): the token at each position and step, its latent
change, and how long each position took to settle; and their LoopSpec counterpart, which readout was right at each
committed token (:func:`plot_readouts`). Same conventions as :mod:`analysis.plots`."""
from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from matplotlib.axes import Axes
from matplotlib.colors import LogNorm
from matplotlib.ticker import MaxNLocator

from analysis.plots import legend, new_axes, styled
from analysis.trials import load_trace
from recdiff.errors import RecdiffError


def position_stats(trace: Any) -> pl.DataFrame:
    """Per generated position of a trace: when it was first written and frozen, how many sampler
    steps it stayed in the wavefront (`steps_to_freeze`, freezing step included), how often its
    token changed after first being written, its core recurrences and mean latent change."""
    t = load_trace(trace)
    tokens, frozen, p0 = t["tokens"], t["frozen"], t["prompt_len"]
    S, P = tokens.shape
    pos = np.arange(p0, P)
    written = tokens[:, p0:] >= 0
    first = np.where(written.any(axis=0), written.argmax(axis=0), -1)
    froze = frozen[:, None] > pos[None, :]                               # (S, P-p0)
    frozen_at = np.where(froze.any(axis=0), froze.argmax(axis=0), -1)
    gen = tokens[:, p0:]
    changes = ((gen[1:] != gen[:-1]) & (gen[:-1] >= 0)).sum(axis=0) if S > 1 else np.zeros(len(pos), int)
    cols: dict[str, Any] = {
        "position": pos,
        "first_step": pl.Series([None if v < 0 else int(v) for v in first], dtype=pl.Int64),
        "frozen_step": pl.Series([None if v < 0 else int(v) for v in frozen_at], dtype=pl.Int64),
        "token_changes": changes,
        "final_token": gen[-1] if S else np.full(len(pos), -1),
    }
    out = pl.DataFrame(cols).with_columns(
        (pl.col("frozen_step") - pl.col("first_step") + 1).alias("steps_to_freeze"))
    if t["counter"] is not None:
        out = out.with_columns(pl.Series("recurrences", np.asarray(t["counter"])[-1, p0:]))
    if t["delta"] is not None:
        d = np.asarray(t["delta"], dtype=np.float64)[:, p0:]
        seen = ~np.isnan(d)
        mean = np.where(seen.any(axis=0), np.nansum(d, axis=0) / np.maximum(seen.sum(axis=0), 1), np.nan)
        out = out.with_columns(pl.Series("mean_delta", mean).fill_nan(None))
    return out


def _front(ax: Axes, t: dict, color: str = "red") -> None:
    S = len(t["frozen"])
    ax.plot(t["frozen"] - 0.5, np.arange(S) + 0.5, color=color, linewidth=1.0, label="frozen front")


def _trace_axes(ax: Axes, t: dict, show_prompt: bool, max_positions: int | None = None) -> None:
    """Cell (s, p) spans x ∈ [p − ½, p + ½]: integer ticks sit on the positions themselves."""
    S, P = t["tokens"].shape
    start = 0 if show_prompt else t["prompt_len"]
    stop = P if max_positions is None else min(P, start + max_positions)
    ax.set_xlim(start - 0.5, stop - 0.5)
    ax.set_ylim(_steps_shown(t, stop), 0)  # sampler steps run top to bottom, as in the paper
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))
    ax.set_xlabel("position")
    ax.set_ylabel("sampler step")
    ax.grid(False)


def _steps_shown(t: dict, stop: int) -> int:
    """Steps until every position left of `stop` is frozen (all steps when that never happens)."""
    done = np.flatnonzero(t["frozen"] >= stop)
    return int(done[0]) + 1 if done.size else len(t["frozen"])


def trace_cells(trace: Any, max_positions: int | None = None, show_prompt: bool = False) -> tuple[int, int]:
    """(positions, steps) that :func:`plot_token_trace` shows: what a figure is sized by."""
    t = load_trace(trace)
    P = t["tokens"].shape[1]
    start = 0 if show_prompt else t["prompt_len"]
    stop = P if max_positions is None else min(P, start + max_positions)
    return stop - start, _steps_shown(t, stop)


_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥"}   # whitespace drawn; other unprintable characters become "·"


def token_label(text: str, width: int = 4) -> str:
    """A token's text as a cell label: whitespace made visible, long tokens cut to `width` characters."""
    shown = "".join(_VISIBLE.get(c, c if c.isprintable() else "·") for c in text) or "∅"
    return shown if len(shown) <= width else shown[: width - 1] + "…"


def _cell_fontsize(ax: Axes, ncols: int, nrows: int, width: int) -> float:
    """The largest font (≤ 7 pt) whose `width`-character labels fit a cell of the axes as laid out now."""
    w_in, h_in = (ax.get_position().width * ax.figure.get_figwidth(),
                  ax.get_position().height * ax.figure.get_figheight())
    cell_w, cell_h = 72 * w_in / max(ncols, 1), 72 * h_in / max(nrows, 1)
    return float(min(7.0, 0.8 * cell_h, 1.6 * cell_w / max(width, 1)))


MIN_TEXT_PT = 4.0  # below this the cell labels are not drawn (text="auto"): ids in colour only


@styled
def plot_token_trace(trace: Any, cmap: str = "viridis", show_prompt: bool = False, text: bool | str = "auto",
                     max_positions: int | None = None, ax: Axes | None = None) -> Axes:
    """Token ids over sampler steps (rows) × positions (columns) with the frozen front
    (fig:qualitative_examples, fig:token_stability left).

    `ax.images[0].get_array()` is the full `tokens` array masked where -1; cell (s, p) is centred on
    x = p, so `ax.lines[0]` has xdata = `frozen` − ½ (the boundary after the last frozen position) at
    ydata = step + ½. The prompt is hidden by the x-limits unless `show_prompt`; `max_positions` shows
    that many positions and the steps until they are frozen. With `text` (default "auto": when the
    trace holds token text, :meth:`recdiff.trace.DiffusionTrace.save`, and it fits the cells), every
    shown cell prints its token (:func:`token_label`): `ax.texts` in row-major order."""
    ax = new_axes(ax)
    t = load_trace(trace)
    S, P = t["tokens"].shape
    ax.imshow(np.ma.masked_less(t["tokens"], 0), cmap=cmap, aspect="auto", extent=(-0.5, P - 0.5, S, 0),
              interpolation="nearest")
    _front(ax, t)
    _trace_axes(ax, t, show_prompt, max_positions)
    ax.set_title("tokens" if text and t["text"] else "token ids")
    if text and t["text"] is not None:
        _cell_text(ax, t, cmap, force=text is True)
    return ax


def _cell_text(ax: Axes, t: dict, cmap: str, force: bool) -> None:
    lo, hi = (int(round(v + 0.5)) for v in ax.get_xlim())
    steps = int(round(ax.get_ylim()[0]))
    size = _cell_fontsize(ax, hi - lo, steps, 4)
    if size < MIN_TEXT_PT and not force:
        return
    tokens = t["tokens"]
    colours = plt.get_cmap(cmap)
    written = tokens[tokens >= 0]
    vmin, vmax = (int(written.min()), int(written.max())) if written.size else (0, 1)
    for s in range(steps):
        for p in range(lo, hi):
            tok = int(tokens[s, p])
            if tok < 0:
                continue
            r, g, b, _ = colours((tok - vmin) / max(vmax - vmin, 1))
            ink = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"
            ax.text(p, s + 0.5, token_label(t["text"].get(tok, str(tok))), ha="center", va="center",
                    fontsize=max(size, 2.0), color=ink, clip_on=True)


@styled
def plot_latent_change(trace: Any, show_prompt: bool = False, ax: Axes | None = None) -> Axes:
    """Relative latent change δ per step × position on a log colour scale, with the frozen front.

    `ax.images[0].get_array()` is `delta` (float32) masked where NaN."""
    ax = new_axes(ax)
    t = load_trace(trace)
    if t["delta"] is None:
        raise RecdiffError("trace has no 'delta' (latent change) array")
    S, P = t["tokens"].shape
    delta = np.ma.masked_invalid(t["delta"])
    positive = delta.compressed()[delta.compressed() > 0]
    norm = LogNorm(vmin=max(float(positive.min()), 1e-5), vmax=float(positive.max())) if positive.size else None
    img = ax.imshow(delta, cmap="magma", norm=norm, aspect="auto", extent=(-0.5, P - 0.5, S, 0),
                    interpolation="nearest")
    ax.figure.colorbar(img, ax=ax, fraction=0.05, pad=0.02, label="‖z − z_prev‖ / ‖z‖")
    _front(ax, t, color="cyan")
    _trace_axes(ax, t, show_prompt)
    ax.set_title("latent change δ")
    return ax


@styled
def plot_position_stability(trace: Any, ax: Axes | None = None) -> Axes:
    """Per generated position: sampler steps until frozen and token changes (fig:token_stability
    right). `ax.lines[0]` = steps_to_freeze, `ax.lines[1]` = token_changes, x = position."""
    ax = new_axes(ax)
    stats = position_stats(trace)
    x = stats["position"].to_numpy()
    ax.plot(x, stats["steps_to_freeze"].cast(pl.Float64).fill_null(float("nan")).to_numpy(),
            label="steps until frozen", drawstyle="steps-mid")
    ax.plot(x, stats["token_changes"].cast(pl.Float64).to_numpy(), label="token changes",
            drawstyle="steps-mid")
    ax.set_xlabel("position")
    ax.set_ylabel("sampler steps")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("per-position stability")
    legend(ax)
    return ax


def readouts(samples_path: str, max_problems: int | None = None) -> tuple[list[list[int]], list[str]]:
    """A LoopSpec trial's readouts from its per-sample table: (per problem, the readout right at each committed token
    after the first: 1 q1, 2 q2, 0 neither; the problem ids), the slice's first `max_problems`."""
    rows = pl.read_parquet(samples_path, columns=["problem_id", "accepted"]).head(max_problems)
    return [list(a or []) for a in rows["accepted"].to_list()], [str(p) for p in rows["problem_id"].to_list()]


@styled
def plot_readouts(accepted: list[list[int]], labels: list[str] | None = None, ax: Axes | None = None) -> Axes:
    """One strip per problem, committed tokens along x, coloured by the readout whose proposal the full-depth readout
    committed (q1, q2, neither). `ax.images[0].get_array()` is the readouts as a (problems, tokens) array, masked past
    each problem's last token (:func:`recdiff.artifacts.readout_matrix`); the dashboard's picture draws the same."""
    from recdiff.artifacts import draw_readouts

    ax = new_axes(ax)
    draw_readouts(ax, accepted, labels)
    ax.grid(False)
    return ax
