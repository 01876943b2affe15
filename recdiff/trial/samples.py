"""A trial's per-sample record: one row per problem (``samples.parquet`` + ``samples.csv``), scored by the
benchmark, a few diffusion traces (``traces/*.npz``) and the first one drawn (``stability.png``).

Columns: docs/architecture.md, "Studies". ``time_s`` and ``tokens_per_s`` only for the problems timed alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SAMPLE_COLUMNS = ["problem_id", "prompt", "output", "extracted", "reference", "correct", "new_tokens",
                  "time_s", "tokens_per_s", "core_passes", "steps"]


@dataclass
class Samples:
    rows: list[dict[str, Any]]
    scores: list[Any]                         # the benchmark's Score per row
    stats: list[dict[str, Any]]               # each result's sampler statistics
    trace_paths: list[str] = field(default_factory=list)
    path: Path | None = None                  # samples.parquet
    stability_png: str | None = None


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

        png = plot_stability(samples.trace_paths[0], out / "stability.png", tokenizer=tokenizer)
        samples.stability_png = str(png) if png else None
    return samples


def write_table(rows: list[dict[str, Any]], out: Path) -> Path:
    import polars as pl

    df = pl.DataFrame([{c: r.get(c) for c in SAMPLE_COLUMNS} for r in rows],
                      schema={"problem_id": pl.Utf8, "prompt": pl.Utf8, "output": pl.Utf8, "extracted": pl.Utf8,
                              "reference": pl.Utf8, "correct": pl.Boolean, "new_tokens": pl.Int64,
                              "time_s": pl.Float64, "tokens_per_s": pl.Float64, "core_passes": pl.Int64,
                              "steps": pl.Int64})
    path = out / "samples.parquet"
    df.write_parquet(path)
    df.write_csv(out / "samples.csv")   # the dashboard shows .csv artifacts as a table
    return path
