"""Measure an embedded model on its held-out benchmark split and print the model-card tables.

    python -m recdiff.tools.evaluate_embedded                         # the shipped model, 200 held-out problems
    python -m recdiff.tools.evaluate_embedded --path outputs/train/compose_long/final --rows static
    python -m recdiff.tools.evaluate_embedded --path recdiff/assets/embedded_arith   # the previous model (arith)

Every row is one trial measured exactly as a sweep measures it (:func:`recdiff.trial.run_trial` on the config that
``conf/`` composes with ``model.path=<path> benchmark=<task> sampler=<row>``): accuracy over the slice (greedy, real
generation, batched), tokens/s as the median over the first ``run.speed_samples`` problems decoded alone, core passes
per generated token and the mean number of generated tokens. Rows: static AR at r ∈ {1, 2, 4, 8, 16, 32, 64},
adaptive, speculative and the diffusion sampler at their defaults (``recdiff/params.py``, the paper's). Also accuracy by
difficulty (compose: ``K``) for every row, and the median relative latent change ‖s_r − s_{r−1}‖/‖s_r‖ per recurrence
at the answer position (the prompt's last state) and over the generated positions of the static r=32 outputs.

The benchmark is the checkpoint's own task: ``compose.json`` in its folder → ``compose``; else its
``train_state.json`` (``data.task``, ``arith`` for runs from before the option); ``--benchmark`` overrides.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

ASSET_DIR = Path(__file__).resolve().parents[1] / "assets" / "embedded"
STATIC_RS = [1, 2, 4, 8, 16, 32, 64]
SAMPLER_ROWS = ("adaptive", "speculative", "diffusion")
LATENT_RS = (4, 8, 16, 32, 64)
DIFFICULTY = {"compose": "k", "arith": "n_ops"}   # the problem's meta key that says how hard it is


def row_plan(rows: str, static_rs: list[int] | None, samplers: list[str] | None) -> list[tuple[str, list[str]]]:
    """(label, Hydra overrides) per row."""
    if static_rs is None:
        static_rs = STATIC_RS if rows in ("all", "static") else []
    if samplers is None:
        samplers = list(SAMPLER_ROWS) if rows in ("all", "samplers") else []
    return ([(f"static r={r}", ["sampler=static", f"sampler.r={r}"]) for r in static_rs]
            + [(name, [f"sampler={name}"]) for name in samplers])


def compose_config(overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import recdiff.schema  # noqa: F401  (the structured-config schemas)

    conf = Path(__file__).resolve().parents[2] / "conf"
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


@torch.no_grad()
def latent_change(model, prompts: list[list[int]], outputs: list[list[int]], rs=LATENT_RS,
                  seed: int = 0) -> dict[str, dict[int, float]]:
    """Median δ_r = ‖s_r − s_{r−1}‖/‖s_r‖ (teacher-forced on prompt + output, random initial state α=1) at the
    answer position (the prompt's last state, which predicts the first generated token) and over every state that
    predicts a generated token."""
    gen = torch.Generator().manual_seed(seed)
    answer: dict[int, list[float]] = {r: [] for r in rs}
    generated: dict[int, list[float]] = {r: [] for r in rs}
    for pr, out in zip(prompts, outputs):
        ids = torch.tensor([pr + out], dtype=torch.long, device=model.freqs_cis.device)
        e = model.embed(ids)
        s = model.initial_state(e, 1.0, gen)
        for i in range(max(rs)):
            prev = s
            s = model.core_step(s, e, step=i)
            if i + 1 in answer:
                d = ((s - prev).norm(dim=-1) / s.norm(dim=-1))[0]
                answer[i + 1].append(float(d[len(pr) - 1]))
                generated[i + 1].extend(d[len(pr) - 1: len(pr) + len(out) - 1].tolist())
    return {"answer_position": {r: statistics.median(v) for r, v in answer.items()},
            "generated_positions": {r: statistics.median(v) for r, v in generated.items()}}


def evaluate(path: str | Path = ASSET_DIR, n: int = 200, rows: str = "all", offset: int = 0,
             benchmark: str | None = None, static_rs: list[int] | None = None, samplers: list[str] | None = None,
             latent: bool | None = None, threads: int = 2, extra: list[str] = (),
             log: Callable[[str], None] = print) -> dict[str, Any]:
    from recdiff.benchmarks import checkpoint_task
    from recdiff.schema import make_plan
    from recdiff.trial import prepare, run_trial

    bench = benchmark or checkpoint_task(path)
    base = [f"model.path={Path(path).resolve() if Path(path).exists() else path}", f"benchmark={bench}",
            f"benchmark.limit={n}", f"benchmark.offset={offset}", "run.progress=false", f"run.threads={threads}",
            *extra]
    row_overrides = row_plan(rows, static_rs, samplers)
    first = make_plan(compose_config(base + (row_overrides[0][1] if row_overrides else [])))
    work = prepare(first.model, first.benchmark).load(first.run.threads)
    key = DIFFICULTY.get(bench)
    results: dict[str, Any] = {"path": str(path), "benchmark": bench, "n": len(work.problems), "offset": offset,
                               "overrides": list(extra), "rows": {}}
    static32: list[dict] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        for label, overrides in row_overrides:
            trial_plan = make_plan(compose_config(base + overrides))
            t0 = time.time()
            res = run_trial(work, trial_plan.trial, Path(tmp) / label.replace(" ", "_"))
            row = {"accuracy": res.accuracy, "low": res.attrs["accuracy_lo"], "high": res.attrs["accuracy_hi"],
                   "tokens_per_s": res.tokens_per_s, "core_passes_per_token": res.attrs["core_passes_per_token"],
                   "new_tokens": res.attrs["mean_new_tokens"], "wall_s": round(time.time() - t0, 1),
                   "params": {"name": trial_plan.sampler.name, **trial_plan.sampler.params()}}
            if key:
                by: dict[int, list[bool]] = {}
                for p, r in zip(work.problems, res.rows):
                    by.setdefault(int(p.meta[key]), []).append(bool(r["correct"]))
                row["by_difficulty"] = {k: sum(v) / len(v) for k, v in sorted(by.items())}
            results["rows"][label] = row
            if label == "static r=32":
                static32 = res.rows
            log(f"{label:<14} acc {row['accuracy']:.3f} [{row['low']:.3f}, {row['high']:.3f}]  "
                f"{row['tokens_per_s']:7.1f} tok/s  {row['core_passes_per_token']:6.2f} passes/tok  "
                f"{row['new_tokens']:5.1f} tokens  ({row['wall_s']:.0f}s)")
    if latent if latent is not None else static32 is not None:
        if static32 is None:
            raise SystemExit("--latent yes needs the static r=32 row")
        tok = work.model.tokenizer
        m = min(len(static32), 100)
        prompts = [tok.encode(r["prompt"], add_special_tokens=False) for r in static32[:m]]
        outs = [tok.encode(r["output"], add_special_tokens=False) for r in static32[:m]]
        results["latent_change_median"] = latent_change(work.model, prompts, outs)
        log("median latent change at the answer position " +
            "  ".join(f"r={r}: {v:.1e}" for r, v in results["latent_change_median"]["answer_position"].items()))
    return results


def format_tables(results: dict[str, Any]) -> str:
    lines = ["| sampler | accuracy | 95% CI | tokens/s (median, batch 1) | core passes / token | generated tokens |",
             "|---|---|---|---|---|---|"]
    for label, r in results["rows"].items():
        lines.append(f"| {label} | {r['accuracy']:.3f} | [{r['low']:.3f}, {r['high']:.3f}] | "
                     f"{r['tokens_per_s']:.1f} | {r['core_passes_per_token']:.2f} | {r['new_tokens']:.1f} |")
    bys = {label: r["by_difficulty"] for label, r in results["rows"].items() if r.get("by_difficulty")}
    if bys:
        keys = sorted({int(k) for by in bys.values() for k in by})
        name = {"compose": "K"}.get(results.get("benchmark", ""), "difficulty")
        lines += ["", f"Accuracy by {name}:", "",
                  "| sampler | " + " | ".join(str(k) for k in keys) + " |", "|---|" + "---|" * len(keys)]
        for label, by in bys.items():
            by = {int(k): v for k, v in by.items()}
            lines.append(f"| {label} | " + " | ".join(f"{by[k]:.2f}" if k in by else "" for k in keys) + " |")
    if "latent_change_median" in results:
        lc = results["latent_change_median"]
        lines.append("")
        for where, v in lc.items():
            lines.append(f"median ‖s_r − s_(r−1)‖/‖s_r‖, {where.replace('_', ' ')}: " +
                         ", ".join(f"r={r}: {x:.1e}" for r, x in v.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--path", default=str(ASSET_DIR))
    ap.add_argument("--benchmark", default=None, help="default: the checkpoint's own task")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--rows", default="all", choices=["all", "static", "samplers"])
    ap.add_argument("--static-r", default=None, help="comma list of static r (overrides --rows for static)")
    ap.add_argument("--samplers", default=None, help="comma list of samplers (overrides --rows for samplers)")
    ap.add_argument("--latent", default=None, choices=["yes", "no"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None, help="also write the results here (the model card's eval_results.json)")
    ap.add_argument("--merge", nargs="+", default=None, help="only print the tables of these result JSONs merged")
    ap.add_argument("overrides", nargs="*", help="more Hydra overrides for every row, e.g. run.speed_samples=32")
    a = ap.parse_args(argv)
    if a.merge:
        res: dict[str, Any] = {"rows": {}}
        for f in a.merge:
            part = json.loads(Path(f).read_text())
            res["rows"].update(part.get("rows", {}))
            res["benchmark"] = part.get("benchmark", res.get("benchmark"))
            if "latent_change_median" in part:
                res["latent_change_median"] = part["latent_change_median"]
        order = [f"static r={r}" for r in STATIC_RS] + list(SAMPLER_ROWS)
        res["rows"] = {k: res["rows"][k] for k in order if k in res["rows"]}
        print(format_tables(res))
        return
    res = evaluate(a.path, a.n, a.rows, a.offset, a.benchmark,
                   static_rs=None if a.static_r is None else [int(x) for x in a.static_r.split(",") if x],
                   samplers=None if a.samplers is None else [x for x in a.samplers.split(",") if x],
                   latent=None if a.latent is None else a.latent == "yes", threads=a.threads, extra=a.overrides,
                   log=lambda s: print(s, flush=True))
    print()
    print(format_tables(res))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
