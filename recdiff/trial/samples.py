"""A trial's per-sample record: one row per problem (``samples.parquet`` + ``samples.csv``), scored by the
benchmark, a few diffusion traces (``traces/*.npz``) and the first one drawn (``stability.png``); a LoopSpec trial's
readouts (which one was right at each committed token, column ``accepted``) drawn instead (``readouts.png``).

Columns: docs/architecture.md, "Studies". ``time_s`` and ``tokens_per_s`` only for the problems timed alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

READOUT_COLUMN = "accepted"   # LoopSpec's, per problem: 1 q1, 2 q2, 0 neither per committed token after the first


@dataclass
class Samples:
    rows: list[dict[str, Any]]
    scores: list[Any]                         # the benchmark's Score per row
    stats: list[dict[str, Any]]               # each result's sampler statistics
    trace_paths: list[str] = field(default_factory=list)
    path: Path | None = None                  # samples.parquet
    picture: str | None = None                # for the dashboard: stability.png or readouts.png


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name))[:80]


def _cut_at_stop(text: str, stops: list[str]) -> str:
    cut = min((text.find(s) for s in stops if s and s in text), default=-1)
    return text if cut < 0 else text[:cut]


def record_samples(work: Any, texts: list[str], results: list[Any], times: list[float], speed_tokens: list[int],
                   codec: Any, out: Path) -> Samples:
    """Decode and score every result, save its trace, write the table. ``times``/``speed_tokens``: the first
    problems' timings alone (batch 1)."""
    tokenizer = work.model.tokenizer
    stops = list(work.benchmark.stop_strings or [])
    rows: list[dict[str, Any]] = []
    completions: list[str] = []
    samples = Samples(rows=rows, scores=[], stats=[])
    for i, (problem, text, res) in enumerate(zip(work.problems, texts, results)):
        completion = codec.decode(list(res.tokens))
        if tokenizer is None:  # byte-level prompts have no stop strings in generate: cut here
            completion = _cut_at_stop(completion, stops)
        completions.append(completion)
        samples.stats.append(dict(res.stats))
        timed = i < len(times)
        rows.append(dict(problem_id=str(problem.id), prompt=text, output=completion, reference=str(problem.reference),
                         new_tokens=int(res.stats.get("new_tokens", len(res.tokens))),
                         time_s=times[i] if timed else None,
                         tokens_per_s=speed_tokens[i] / times[i] if timed and times[i] > 0 else None,
                         core_passes=int(res.stats.get("core_passes", 0)), steps=int(res.stats.get("steps", 0))))
        if READOUT_COLUMN in res.stats:
            rows[-1][READOUT_COLUMN] = [int(a) for a in res.stats[READOUT_COLUMN]]
        if getattr(res, "trace", None) is not None:
            path = out / "traces" / f"{i:03d}_{_safe(problem.id)}.npz"
            path.parent.mkdir(parents=True, exist_ok=True)
            res.trace.save(str(path), decode=lambda i: codec.decode([i]))
            samples.trace_paths.append(str(path))

    samples.scores = work.benchmark.score_all(work.problems, completions)
    for row, score in zip(rows, samples.scores):
        row["correct"] = bool(score.correct)
        row["extracted"] = score.extracted
    samples.path = write_table(rows, out)
    if samples.trace_paths:
        from recdiff.artifacts import plot_stability

        samples.picture = str(plot_stability(samples.trace_paths[0], out / "stability.png", tokenizer=tokenizer))
    elif rows and READOUT_COLUMN in rows[0]:
        from recdiff.artifacts import plot_readouts

        samples.picture = str(plot_readouts([r[READOUT_COLUMN] for r in rows], out / "readouts.png",
                                            [r["problem_id"] for r in rows]))
    return samples


def write_table(rows: list[dict[str, Any]], out: Path) -> Path:
    import polars as pl

    schema = {"problem_id": pl.Utf8, "prompt": pl.Utf8, "output": pl.Utf8, "extracted": pl.Utf8,
              "reference": pl.Utf8, "correct": pl.Boolean, "new_tokens": pl.Int64, "time_s": pl.Float64,
              "tokens_per_s": pl.Float64, "core_passes": pl.Int64, "steps": pl.Int64}
    if rows and READOUT_COLUMN in rows[0]:
        schema[READOUT_COLUMN] = pl.List(pl.Int8)
    df = pl.DataFrame([{c: r.get(c) for c in schema} for r in rows], schema=schema)
    path = out / "samples.parquet"
    df.write_parquet(path)
    if READOUT_COLUMN in schema:   # a CSV cell holds no list: the readouts as one string, "1 1 2 0 ..."
        df = df.with_columns(pl.col(READOUT_COLUMN).cast(pl.List(pl.String)).list.join(" "))
    df.write_csv(out / "samples.csv")   # the dashboard shows .csv artifacts as a table
    return path
