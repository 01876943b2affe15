"""The report of a study with LoopSpec trials: a table of their readouts (r_draft, r_draft2, q1/q2 acceptance,
sequential recurrences and core passes per token, peak lanes, tokens/s, speed-up) and the readouts picture of the
fastest one, drawn from its per-sample table."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from analysis.loopspec import loopspec_table
from analysis.report import plan_figures, write_report


def _samples(path: Path, accepted: list[list[int]]) -> str:
    pl.DataFrame({"problem_id": [f"p{i}" for i in range(len(accepted))], "output": ["x"] * len(accepted),
                  "accepted": accepted}, schema_overrides={"accepted": pl.List(pl.Int8)}).write_parquet(path)
    return str(path)


def study(tmp_path: Path) -> pl.DataFrame:
    base = {"study": "s", "state": "COMPLETE", "benchmark": "compose", "init_scale": 0.0, "accuracy": 0.5,
            "accuracy_lo": 0.4, "accuracy_hi": 0.6, "kv_cache_bytes": 1000}
    rows = [{**base, "number": 0, "sampler": "static", "r": 32, "kv_cache": "shared", "tokens_per_s": 20.0,
             "tokens_per_s_lo": 19.0, "tokens_per_s_hi": 21.0, "speedup": 1.0, "speedup_lo": 0.9, "speedup_hi": 1.1}]
    spec = [(1, 4, None, 0.75, None, 6.0, 9, 40.0, 2.0, [[1, 1, 0], [1]]),
            (2, 2, 8, 0.5, 0.25, 9.5, 21, 50.0, 2.5, [[2, 1, 0, 1], [0], []])]
    for number, k, k2, q1, q2, seq, lanes, tps, sp, accepted in spec:
        rows.append({**base, "number": number, "sampler": "loopspec", "r": 32, "r_draft": k, "r_draft2": k2,
                     "kv_cache": "per_step", "q1_acceptance": q1, "q2_acceptance": q2, "sequential_per_token": seq,
                     "core_passes_per_token": 40.0, "peak_lanes": lanes, "tokens_per_s": tps,
                     "tokens_per_s_lo": tps - 1, "tokens_per_s_hi": tps + 1, "speedup": sp, "speedup_lo": sp - 0.1,
                     "speedup_hi": sp + 0.1, "samples_path": _samples(tmp_path / f"{number}.parquet", accepted)})
    return pl.DataFrame(rows, infer_schema_length=None)


def test_the_report_tabulates_loopspecs_readouts_and_draws_the_fastest(tmp_path):
    df = study(tmp_path)
    table = loopspec_table(df)
    assert table.select("number", "r_draft", "r_draft2").rows() == [(2, 2, 8), (1, 4, None)]
    assert table.row(0, named=True)["q2_acceptance"] == 0.25 and table.row(1, named=True)["peak_lanes"] == 9

    builders = dict(plan_figures(df))
    ax = builders["loopspec_readouts"]().axes[0]
    # trial 2 is the faster (2.5x): its three problems, the third with no token after its first
    np.testing.assert_array_equal(ax.images[0].get_array().filled(-1), [[2, 1, 0, 1], [0, -1, -1, -1],
                                                                        [-1, -1, -1, -1]])
    assert [t.get_text() for t in ax.get_yticklabels()] == ["p0", "p1", "p2"]
    assert "trial 2" in ax.get_title() and "draft depth=2" in ax.get_title()

    out = tmp_path / "report"
    write_report(df, out, formats=("png",), progress=None)
    md = (out / "loopspec.md").read_text().splitlines()
    assert md[0].startswith("| trial | r | r_draft | r_draft2 | q1 acceptance | q2 acceptance |")
    assert md[2] == ("| 2 | 32 | 2 | 8 | 0.500 | 0.250 | 9.50 | 40.0 | 21 | 50.0 [49.0, 51.0] | "
                     "2.50x [2.40, 2.60] |")
    assert md[3].startswith("| 1 | 32 | 4 | — | 0.750 | — | 6.00 |")
    report = (out / "report.md").read_text()
    assert "## LoopSpec" in report and "![loopspec_readouts](loopspec_readouts.png)" in report
    assert "speed-up vs Static AR (r=32)" in md[0]
