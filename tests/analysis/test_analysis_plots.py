"""Each figure function plots the data it was given (asserted on artist data, not pixels)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import pytest
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection, PathCollection

from analysis import plots, trace_plots
from analysis.labels import LABELS


@pytest.fixture
def grid() -> pl.DataFrame:
    """Diffusion r′ × β grid plus static AR (r=8, r=32), adaptive and speculative baselines."""
    rows = []
    for i, (r_inner, beta) in enumerate([(1, 0.0), (1, 0.5), (4, 0.0), (4, 0.5), (2, 0.0)]):
        rows.append({"number": i, "state": "COMPLETE", "sampler": "diffusion", "r_inner": r_inner, "beta": beta,
                     "r": 32, "accuracy": 0.3 + 0.02 * r_inner + 0.1 * beta,
                     "tokens_per_s": 300.0 / r_inner + 10 * beta,
                     "accuracy_lo": 0.25, "accuracy_hi": 0.6})
    rows += [
        {"number": 5, "state": "COMPLETE", "sampler": "static", "r": 32, "accuracy": 0.42, "tokens_per_s": 36.0},
        {"number": 6, "state": "COMPLETE", "sampler": "static", "r": 8, "accuracy": 0.31, "tokens_per_s": 137.0},
        {"number": 7, "state": "COMPLETE", "sampler": "adaptive", "r": 32, "accuracy": 0.423, "tokens_per_s": 66.9},
        {"number": 8, "state": "COMPLETE", "sampler": "speculative", "r": 32, "accuracy": 0.428, "tokens_per_s": 69.5},
        {"number": 9, "state": "FAIL", "sampler": "diffusion", "r_inner": 8, "beta": 0.0, "r": 32},
    ]
    return pl.DataFrame(rows)


def test_pareto_plot(grid):
    ax = plots.plot_pareto(grid)
    assert isinstance(ax, Axes)
    diff = grid.filter((pl.col("sampler") == "diffusion") & (pl.col("state") == "COMPLETE"))
    np.testing.assert_allclose(ax.collections[0].get_offsets(), diff.select("tokens_per_s", "accuracy").to_numpy())
    # One colour per (r′, β) setting.
    assert len({tuple(c) for c in ax.collections[0].get_facecolors()}) == 5
    front = [l for l in ax.lines if l.get_label() == "Pareto front"][0]
    # Front of the diffusion points by hand: (30·… ) every point here trades off except none dominated?
    pts = diff.select("tokens_per_s", "accuracy").rows()
    expected = sorted(p for p in pts if not any(q[0] >= p[0] and q[1] >= p[1] and q != p for q in pts))
    assert list(zip(front.get_xdata(), front.get_ydata())) == pytest.approx(expected)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "r′=1, β_t=0.5" in labels and len([l for l in labels if l.startswith("r′=")]) == 5
    # Baselines: static AR at every depth recorded (r=8 is the depth trade-off), adaptive, speculative.
    names = ("Static AR (r=32)", "Static AR (r=8)", "Adaptive Compute AR", "Speculative Decoding AR")
    assert set(names) <= set(labels)
    base = {c.get_label(): c.get_offsets()[0].tolist() for c in ax.collections if c.get_label() in names}
    assert base == {"Static AR (r=32)": [36.0, 0.42], "Static AR (r=8)": [137.0, 0.31],
                    "Adaptive Compute AR": [66.9, 0.423], "Speculative Decoding AR": [69.5, 0.428]}
    assert [(t.get_text(), t.xy) for t in ax.texts] == [("r=8", (137.0, 0.31)), ("r=32", (36.0, 0.42))]
    (ref,) = [l for l in ax.lines if l.get_linestyle() == ":"]
    assert list(ref.get_ydata()) == [0.42, 0.42]                                     # the line is at r=32, not r=8
    assert ax.get_xlabel() == LABELS["tokens_per_s"] and ax.get_ylabel() == "accuracy"


def test_pareto_plot_static_r_picks_depths(grid):
    ax = plots.plot_pareto(grid, static_r=[32])
    labels = ax.get_legend_handles_labels()[1]
    assert "Static AR (r=32)" in labels and "Static AR (r=8)" not in labels and not ax.texts


def _embedded_main_job() -> pl.DataFrame:
    """The main job's shape on the embedded default: every diffusion trial and the deep baselines at accuracy 1.0
    (Wilson interval [0.981, 1]), static AR r=4 and r=8 far below."""
    acc = {"accuracy": 1.0, "accuracy_lo": 0.981, "accuracy_hi": 1.0}
    rows = [{"number": n, "state": "COMPLETE", "sampler": "diffusion", "r_inner": ri, "beta": 0.0, "r": 32,
             "tokens_per_s": tps, "tokens_per_s_lo": tps - 5, "tokens_per_s_hi": tps + 5, **acc}
            for n, ri, tps in [(0, 1, 258.2), (6, 2, 231.3), (7, 4, 178.4), (8, 8, 111.1)]]
    rows += [{"number": 1, "state": "COMPLETE", "sampler": "static", "r": 32, "tokens_per_s": 50.3, **acc},
             {"number": 2, "state": "COMPLETE", "sampler": "static", "r": 4, "tokens_per_s": 254.1,
              "accuracy": 0.28, "accuracy_lo": 0.222, "accuracy_hi": 0.346},
             {"number": 3, "state": "COMPLETE", "sampler": "static", "r": 8, "tokens_per_s": 148.6,
              "accuracy": 0.43, "accuracy_lo": 0.363, "accuracy_hi": 0.499},
             {"number": 4, "state": "COMPLETE", "sampler": "adaptive", "r": 32, "tokens_per_s": 195.0, **acc},
             {"number": 5, "state": "COMPLETE", "sampler": "speculative", "r": 32, "tokens_per_s": 93.9, **acc}]
    return pl.DataFrame(rows)


def test_pareto_axes_cover_every_trial_within_100_percent():
    """Static AR r=4/8 and the trials at 100% on one figure: the limits hold every point and error bar, and the
    accuracy axis stops at 1 (autoscaling alone pads it past 100%); nothing is clipped at the edge."""
    df = _embedded_main_job()
    ax = plots.plot_pareto(df)
    base = {c.get_label(): c.get_offsets()[0].tolist() for c in ax.collections if c.get_label().startswith("Static")}
    assert base == {"Static AR (r=4)": [254.1, 0.28], "Static AR (r=8)": [148.6, 0.43], "Static AR (r=32)": [50.3, 1.0]}
    points = np.vstack([c.get_offsets() for c in ax.collections if isinstance(c, PathCollection)])
    ends = np.vstack([seg for c in ax.collections if isinstance(c, LineCollection) for seg in c.get_segments()])
    # Static r=4's bar runs from its Wilson interval's low end, 0.222: the lowest extent of the figure.
    assert ends[:, 1].min() == pytest.approx(0.222) and ends[:, 1].max() == pytest.approx(1.0)
    assert ends[:, 0].max() == pytest.approx(263.2)                # diffusion r′=1's tokens/s interval
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    assert y1 == 1.0 and 0.0 <= y0 <= 0.222
    for xy in (points, ends):
        assert ((xy[:, 0] >= x0) & (xy[:, 0] <= x1) & (xy[:, 1] >= y0) & (xy[:, 1] <= y1)).all()
    assert not any(c.get_clip_on() for c in ax.collections)      # a marker at 100% is drawn whole


def test_accuracy_axis_clamped_in_tradeoff_and_cache_sharing():
    df = pl.DataFrame({"sampler": ["diffusion"] * 3, "epsilon": [0.01, 0.03, 0.1], "accuracy": [1.0, 1.0, 0.99],
                       "tokens_per_s": [80.0, 150.0, 200.0]})
    y0, y1 = plots.plot_tradeoff(df, param="epsilon", baselines=False).get_ylim()
    assert y1 == 1.0 and y0 <= 0.99
    kv = pl.DataFrame({"sampler": ["static"] * 2, "r": [32, 32], "kv_cache": ["shared", "per_step"],
                       "kv_cache_bytes": [2**20, 32 * 2**20], "accuracy": [0.0, 1.0]})
    assert plots.plot_cache_sharing(kv).get_ylim() == (0.0, 1.0)


def test_pareto_plot_error_bars_and_given_axes(grid):
    fig, ax = plt.subplots()
    assert plots.plot_pareto(grid, baselines=False, frontier=False, ax=ax) is ax
    bars = ax.collections[-1].get_segments()  # errorbar LineCollection: one vertical segment per point
    diff = grid.filter((pl.col("sampler") == "diffusion") & (pl.col("state") == "COMPLETE"))
    np.testing.assert_allclose([s[:, 1] for s in bars], [[0.25, 0.6]] * len(diff))
    assert not ax.lines


def test_pareto_plot_draws_ties_and_error_bars_on_both_axes():
    """A (100 t/s) and B (50 t/s) trade off; D is below B's measured values but within B's accuracy interval: a tie,
    ringed but off the line through the measured front; C lies beyond B's intervals on both axes: dominated."""
    df = pl.DataFrame({"number": [0, 1, 2, 3], "state": ["COMPLETE"] * 4, "sampler": ["diffusion"] * 4,
                       "r_inner": [1, 2, 4, 8], "tokens_per_s": [100.0, 50.0, 40.0, 45.0],
                       "tokens_per_s_lo": [95.0, 48.0, 38.0, 43.0], "tokens_per_s_hi": [105.0, 52.0, 42.0, 47.0],
                       "accuracy": [0.50, 0.52, 0.30, 0.51], "accuracy_lo": [0.45, 0.47, 0.28, 0.46],
                       "accuracy_hi": [0.55, 0.57, 0.32, 0.56]})
    ax = plots.plot_pareto(df, hue="r_inner")
    ybars, xbars = ax.collections[1].get_segments(), ax.collections[2].get_segments()
    np.testing.assert_allclose([s[:, 1] for s in ybars], df.select("accuracy_lo", "accuracy_hi").to_numpy())
    np.testing.assert_allclose([s[:, 0] for s in xbars], df.select("tokens_per_s_lo", "tokens_per_s_hi").to_numpy())
    (rings,) = [c for c in ax.collections if c.get_label() == "not dominated beyond the 95% intervals"]
    assert sorted(map(tuple, rings.get_offsets().tolist())) == [(45.0, 0.51), (50.0, 0.52), (100.0, 0.50)]
    (line,) = [l for l in ax.lines if l.get_label() == "Pareto front"]
    assert list(zip(line.get_xdata(), line.get_ydata())) == [(50.0, 0.52), (100.0, 0.50)]


def test_heatmap(grid):
    ax = plots.plot_heatmap(grid, value="accuracy", row="r_inner", col="beta")
    arr = ax.images[0].get_array()
    expected = np.array([[0.32, 0.37], [0.34, np.nan], [0.38, 0.43]])  # rows r′=1,2,4; cols β=0,0.5
    np.testing.assert_allclose(arr.filled(np.nan), expected)
    assert arr.mask.tolist() == [[False, False], [False, True], [False, False]]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "0.5"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["1", "2", "4"]
    assert ax.get_xlabel() == "β_t" and ax.get_ylabel() == "r′"


def _colour_bar_limits(ax: Axes) -> tuple[float, float]:
    (cbar_ax,) = [a for a in ax.figure.axes if a is not ax]
    return cbar_ax.get_ylim()


def test_heatmap_accuracy_colour_bar_stays_within_100_percent():
    """A flat grid at 100% (every trial of the embedded default): matplotlib's own scale would run 90-110%."""
    df = pl.DataFrame({"r_inner": [1, 2, 4, 8], "beta": [0.0] * 4, "accuracy": [1.0] * 4})
    ax = plots.plot_heatmap(df)
    img = ax.images[0]
    assert (img.norm.vmin, img.norm.vmax) == pytest.approx((0.9, 1.0))
    assert _colour_bar_limits(ax) == pytest.approx((0.9, 1.0))
    assert {t.get_color() for t in ax.texts} == {"white"}        # 100.0 on the dark end of the map


@pytest.mark.parametrize("values, limits", [([0.97, 0.99, 1.0, 1.0], (0.9, 1.0)),   # near 1: widened downward
                                            ([0.0, 0.02], (0.0, 0.1)),              # near 0: widened upward
                                            ([0.28, 0.43, 0.95], (0.28, 0.95))])    # wide: the data's range
def test_heatmap_accuracy_colour_bar_covers_data(values, limits):
    df = pl.DataFrame({"r_inner": list(range(len(values))), "beta": [0.0] * len(values), "accuracy": values})
    ax = plots.plot_heatmap(df)
    vmin, vmax = ax.images[0].norm.vmin, ax.images[0].norm.vmax
    assert (vmin, vmax) == pytest.approx(limits)
    assert 0.0 <= vmin <= min(values) and max(values) <= vmax <= 1.0


def test_heatmap_averages_repeats():
    df = pl.DataFrame({"r_inner": [1, 1, 2], "beta": [0.0, 0.0, 0.0], "tokens_per_s": [10.0, 20.0, 5.0]})
    ax = plots.plot_heatmap(df, value="tokens_per_s")
    np.testing.assert_allclose(ax.images[0].get_array(), [[15.0], [5.0]])


def test_tradeoff_lines_per_group(grid):
    ax = plots.plot_tradeoff(grid, param="r_inner", group="beta", baselines=False)
    assert [l.get_label() for l in ax.lines] == ["β_t=0", "β_t=0.5"]
    beta0 = grid.filter((pl.col("beta") == 0.0) & (pl.col("state") == "COMPLETE")).sort("r_inner")
    np.testing.assert_allclose(ax.lines[0].get_xdata(), beta0["tokens_per_s"].to_numpy())
    np.testing.assert_allclose(ax.lines[0].get_ydata(), beta0["accuracy"].to_numpy())
    assert [t.get_text() for t in ax.texts[:3]] == ["1", "2", "4"]  # points annotated with r′


def test_tradeoff_error_bars_on_both_axes_average_repeats():
    """Two repeats at ε=0.01 (their mean's interval: MOVER, each side's distances in quadrature ÷ 2) and one at 0.1."""
    df = pl.DataFrame({"sampler": ["diffusion"] * 3, "epsilon": [0.01, 0.01, 0.1], "accuracy": [0.4, 0.5, 0.3],
                       "accuracy_lo": [0.3, 0.4, 0.2], "accuracy_hi": [0.5, 0.6, 0.4],
                       "tokens_per_s": [80.0, 100.0, 200.0], "tokens_per_s_lo": [77.0, 96.0, 190.0],
                       "tokens_per_s_hi": [83.0, 104.0, 210.0]})
    ax = plots.plot_tradeoff(df, param="epsilon", baselines=False)
    assert ax.lines[0].get_xdata().tolist() == [90.0, 200.0] and ax.lines[0].get_ydata().tolist() == [0.45, 0.3]
    ybars, xbars = ax.collections[0].get_segments(), ax.collections[1].get_segments()
    half_acc, half_tps = (0.1**2 + 0.1**2) ** 0.5 / 2, (3.0**2 + 4.0**2) ** 0.5 / 2   # 0.0707, 2.5
    np.testing.assert_allclose([s[:, 1] for s in ybars], [[0.45 - half_acc, 0.45 + half_acc], [0.2, 0.4]])
    np.testing.assert_allclose([s[:, 0] for s in xbars], [[90 - half_tps, 90 + half_tps], [190.0, 210.0]])


def test_tradeoff_single_line_with_baselines():
    df = pl.DataFrame({"sampler": ["diffusion"] * 3 + ["static"], "epsilon": [0.1, 0.01, 0.03, None],
                       "r": [32] * 4, "accuracy": [0.3, 0.45, 0.4, 0.42], "tokens_per_s": [200.0, 80.0, 150.0, 36.0]})
    ax = plots.plot_tradeoff(df, param="epsilon")
    assert ax.lines[0].get_xdata().tolist() == [80.0, 150.0, 200.0]  # ordered by ε
    assert list(ax.lines[1].get_ydata()) == [0.42, 0.42]        # static r=32 reference line
    assert "Static AR (r=32)" in ax.get_legend_handles_labels()[1]


def test_cache_sharing():
    df = pl.DataFrame({"sampler": ["static"] * 4, "r": [32, 32, 16, 16], "kv_cache": ["shared", "per_step"] * 2,
                       "kv_cache_bytes": [2**20, 32 * 2**20, 2**20, 16 * 2**20],
                       "accuracy": [0.41, 0.42, 0.30, 0.31]})
    ax = plots.plot_cache_sharing(df)
    per_step, shared = ax.collections[0], ax.collections[1]
    assert per_step.get_label() == "KV cache=per_step" and shared.get_label() == "KV cache=shared"
    np.testing.assert_allclose(shared.get_offsets(), [[2**20, 0.41], [2**20, 0.30]])
    np.testing.assert_allclose(per_step.get_offsets(), [[32 * 2**20, 0.42], [16 * 2**20, 0.31]])
    assert ax.xaxis.get_major_formatter()(2**20, 0) == "1 MiB"


def test_token_trace(trace):
    ax = trace_plots.plot_token_trace(trace)
    arr = ax.images[0].get_array()
    np.testing.assert_array_equal(arr.filled(-1), trace["tokens"])
    assert arr.mask.tolist() == (trace["tokens"] < 0).tolist()
    front = ax.lines[0]
    assert front.get_xdata().tolist() == (trace["frozen"] - 0.5).tolist()   # cell p is centred on x = p
    assert front.get_ydata().tolist() == [s + 0.5 for s in range(6)]
    assert ax.get_xlim() == (2.5, 7.5)  # prompt hidden, generated positions 3..7 shown
    assert ax.get_ylim() == (6, 0)  # steps run top to bottom
    ax.figure.canvas.draw()
    ticks = [t for t in ax.get_xticks() if 2.5 <= t <= 7.5]
    assert ticks and all(float(t).is_integer() for t in ticks)   # positions, not cell edges
    assert not ax.texts   # no token text recorded in this trace: ids in colour only


def test_token_trace_prints_token_text(trace):
    """A trace saved with its tokens' text (recdiff.trace.DiffusionTrace.save(decode=...)) prints them in the cells."""
    text = {i: f"t{i}" for i in np.unique(trace["tokens"][trace["tokens"] >= 0]).tolist()}
    text[22] = " "
    traced = {**trace, "text_ids": np.array(list(text)), "text": np.array(list(text.values()))}
    fig = plt.figure(figsize=(4, 3))
    ax = trace_plots.plot_token_trace(traced, ax=fig.add_subplot())
    shown = [(s, p) for s in range(6) for p in range(3, 8) if trace["tokens"][s, p] >= 0]
    assert len(ax.texts) == len(shown)
    got = {(round(t.get_position()[1] - 0.5), round(t.get_position()[0])): t.get_text() for t in ax.texts}
    assert got == {(s, p): trace_plots.token_label(text[int(trace["tokens"][s, p])]) for s, p in shown}
    assert got[(2, 4)] == "␣"                           # whitespace is drawn, not left blank
    assert min(t.get_fontsize() for t in ax.texts) >= trace_plots.MIN_TEXT_PT
    # a window of positions: the first two generated positions and the steps until both are frozen
    ax = trace_plots.plot_token_trace(traced, max_positions=2)
    assert ax.get_xlim() == (2.5, 4.5) and ax.get_ylim() == (4, 0)   # frozen reaches 5 at step 3
    assert {round(t.get_position()[0]) for t in ax.texts} == {3, 4}


def test_latent_change(trace):
    ax = trace_plots.plot_latent_change(trace)
    arr = ax.images[0].get_array()
    expected = np.ma.masked_invalid(trace["delta"].astype(np.float32))
    np.testing.assert_array_equal(arr.mask, expected.mask)
    np.testing.assert_allclose(arr.compressed(), expected.compressed())


def test_position_stats_and_stability(trace):
    stats = trace_plots.position_stats(trace)
    # Hand-derived from the trace in conftest (positions 3..7).
    assert stats["position"].to_list() == [3, 4, 5, 6, 7]
    assert stats["first_step"].to_list() == [0, 1, 2, 3, 4]
    assert stats["frozen_step"].to_list() == [2, 3, 4, 5, 5]
    assert stats["steps_to_freeze"].to_list() == [3, 3, 3, 3, 2]
    assert stats["token_changes"].to_list() == [1, 1, 1, 1, 1]
    assert stats["recurrences"].to_list() == [24, 20, 16, 12, 8]
    ax = trace_plots.plot_position_stability(trace)
    assert ax.lines[0].get_xdata().tolist() == [3, 4, 5, 6, 7]
    assert ax.lines[0].get_ydata().tolist() == [3, 3, 3, 3, 2]
    assert ax.lines[1].get_ydata().tolist() == [1, 1, 1, 1, 1]


def test_trace_from_file(tmp_path, trace):
    np.savez(tmp_path / "t.npz", **trace)
    ax = trace_plots.plot_token_trace(tmp_path / "t.npz")
    np.testing.assert_array_equal(ax.images[0].get_array().filled(-1), trace["tokens"])


def test_save_figure(tmp_path, grid):
    ax = plots.plot_pareto(grid)
    paths = plots.save_figure(ax.figure, tmp_path / "pareto")
    assert [p.name for p in paths] == ["pareto.png", "pareto.pdf"]
    assert all(p.stat().st_size > 0 for p in paths)
