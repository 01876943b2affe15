"""Measure the embedded model on the held-out ``arith`` split and print the model-card table.

    python -m recdiff.evaluate_embedded                       # shipped checkpoint, 200 test problems
    python -m recdiff.evaluate_embedded --path outputs/train/embedded/latest --n 200 --rows static

Rows: static AR at r ∈ {1, 2, 4, 8, 16, 32, 64}, adaptive (r=32, ε=0.03), speculative (r=32, r_draft=4,
lookahead=4) and the diffusion sampler at the paper's defaults (ε=0.03, β=0, η=0.1, r'=4, W=128), all greedy,
one problem at a time through ``recdiff.generate``.  Columns: accuracy with the 95% Wilson interval, median
tokens/s over problems, core passes per generated token.  Also: the median relative latent change
‖s_r − s_{r−1}‖/‖s_r‖ at r ∈ {8, 16, 32, 64} over the completion positions of the (teacher-forced) reference
solutions.

When ``recdiff.generate`` is not available the static rows fall back to a no-cache greedy loop (batched over
prompts of equal length) and the other rows are skipped.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import torch

ASSET_DIR = Path(__file__).resolve().parent / "assets" / "embedded"
STATIC_RS = [1, 2, 4, 8, 16, 32, 64]
SAMPLER_ROWS = ("adaptive", "speculative", "diffusion")
CONF_DIR = Path(__file__).resolve().parent.parent / "conf" / "sampler"


def sampler_defaults(name: str) -> dict:
    """The sampler's parameters as the sweep uses them: ``conf/sampler/<name>.yaml`` (paper defaults) where
    present, else the sampler's own defaults."""
    f = CONF_DIR / f"{name}.yaml"
    if not f.is_file():
        return {}
    import yaml

    d = yaml.safe_load(f.read_text()) or {}
    return {k: v for k, v in d.items() if k not in ("name", "defaults") and v is not None}


def wilson_interval(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    try:
        from recdiff.benchmarks.stats import wilson_interval as wi
        return tuple(wi(k, n))  # type: ignore[return-value]
    except ImportError:
        pass
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    den = 1 + z * z / n
    c = (p + z * z / (2 * n)) / den
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, c - h), min(1.0, c + h))


def _generate_fn():
    try:
        import recdiff
        return getattr(recdiff, "generate", None)
    except ImportError:
        return None


@torch.no_grad()
def greedy_static_nocache(model, prompts: list[list[int]], r: int, max_new_tokens: int, eos: int, seed: int = 0):
    """Fallback static AR: full no-cache forward per new token, prompts of equal length batched together.
    Returns (list of new-token lists, list of per-problem seconds)."""
    out: list[list[int] | None] = [None] * len(prompts)
    secs = [0.0] * len(prompts)
    groups: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        groups.setdefault(len(p), []).append(i)
    gen = torch.Generator().manual_seed(seed)
    for L, idx in groups.items():
        t0 = time.perf_counter()
        ids = torch.tensor([prompts[i] for i in idx], dtype=torch.long)
        done = torch.zeros(len(idx), dtype=torch.bool)
        for _ in range(max_new_tokens):
            logits, _ = model.forward(ids, r=r, init_scale=1.0, generator=gen)
            nxt = logits[:, -1].argmax(-1)
            ids = torch.cat([ids, nxt[:, None]], dim=1)
            done |= nxt == eos
            if bool(done.all()):
                break
        dt = (time.perf_counter() - t0) / len(idx)
        for j, i in enumerate(idx):
            toks = ids[j, L:].tolist()
            if eos in toks:
                toks = toks[: toks.index(eos) + 1]
            out[i] = toks
            secs[i] = dt
    return out, secs


def trained_layout(path: str | Path) -> int:
    """``data.steps_per_line`` the checkpoint was trained with (its ``train_state.json``; runs from before the
    option existed wrote one sentence per line), so reference solutions are measured in the model's own format."""
    f = Path(path) / "train_state.json"
    if not f.is_file():
        from recdiff.benchmarks import arith
        return arith.STEPS_PER_LINE
    return int(json.loads(f.read_text()).get("config", {}).get("data", {}).get("steps_per_line", 1))


@torch.no_grad()
def latent_change(model, problems, rs=(8, 16, 32, 64), seed: int = 0, steps_per_line: int | None = None) -> dict[int, float]:
    """Median δ_r = ‖s_r − s_{r−1}‖/‖s_r‖ over completion positions of prompt + reference solution (written
    ``steps_per_line`` sentences per line; default: the benchmark's layout)."""
    from recdiff.benchmarks import arith

    tok = model.tokenizer
    gen = torch.Generator().manual_seed(seed)
    deltas: dict[int, list[float]] = {r: [] for r in rs}
    for p in problems:
        pr = tok.encode(arith.prompt_text(p.question), add_special_tokens=False)
        sol = p.meta["solution"] if steps_per_line is None else arith.write_solution(p.meta["steps"], steps_per_line)
        co = tok.encode(arith.completion_text(sol), add_special_tokens=False)
        ids = torch.tensor([pr + co], dtype=torch.long)
        e = model.embed(ids)
        s = model.initial_state(e, 1.0, gen)
        for i in range(max(rs)):
            prev = s
            s = model.core_step(s, e, step=i)
            if i + 1 in deltas:
                d = (s - prev).norm(dim=-1) / s.norm(dim=-1)
                deltas[i + 1].extend(d[0, len(pr):].tolist())
    return {r: statistics.median(v) for r, v in deltas.items()}


def evaluate(path: str | Path = ASSET_DIR, n: int = 200, rows: str = "all", max_new_tokens: int = 64,
             offset: int = 0, seed: int = 0, log=print, static_rs=None, samplers=None, latent: bool | None = None,
             threads: int = 2, init_scale: float | None = None) -> dict:
    import recdiff.load as load
    from recdiff.benchmarks import get_benchmark

    torch.set_num_threads(threads)
    model = load.load_model(str(path))
    tok = model.tokenizer
    bench = get_benchmark("arith", split="test", limit=n, offset=offset)
    problems = bench.problems()
    prompts = [tok.encode(bench.render(p, tok), add_special_tokens=False) for p in problems]
    eos = tok.eos_token_id
    generate = _generate_fn()
    plan: list[tuple[str, str, dict]] = []
    if static_rs is None:
        static_rs = STATIC_RS if rows in ("all", "static") else []
    if samplers is None:
        samplers = SAMPLER_ROWS if rows in ("all", "samplers") else []
    if latent is None:
        latent = rows in ("all", "latent")
    plan += [(f"static r={r}", "static", {**sampler_defaults("static"), "r": r}) for r in static_rs]
    plan += [(name, name, sampler_defaults(name)) for name in samplers]
    if init_scale is not None:  # override α for every row (the model is trained from random states, α = 1)
        plan = [(label, sampler, {**params, "init_scale": float(init_scale)}) for label, sampler, params in plan]
    results: dict = {"n": len(problems), "path": str(path), "rows": {}}
    for label, sampler, params in plan:
        t_row = time.time()
        if generate is None:
            if sampler != "static":
                log(f"{label}: skipped (recdiff.generate not available)")
                continue
            outs, secs = greedy_static_nocache(model, prompts, params["r"], max_new_tokens, eos, seed)
            passes = [len(o) * params["r"] for o in outs]  # per generated token (prefill not counted)
            new = [len(o) for o in outs]
        else:
            outs, secs, passes, new = [], [], [], []
            for p_ids in prompts:
                t0 = time.perf_counter()
                res = generate(model, torch.tensor([p_ids]), sampler=sampler, max_new_tokens=max_new_tokens,
                               seed=seed, temperature=0.0, stop_token_ids=[eos],
                               stop_strings=bench.stop_strings, **params)
                secs.append(time.perf_counter() - t0)
                outs.append(list(res.tokens))
                passes.append(int(res.stats["core_passes"]))
                new.append(int(res.stats.get("new_tokens", len(res.tokens))))
        texts = [tok.decode(o, skip_special_tokens=True) for o in outs]
        scores = bench.score_all(problems, texts)
        k = sum(s.correct for s in scores)
        lo, hi = wilson_interval(k, len(scores))
        tps = statistics.median([nw / max(s, 1e-9) for nw, s in zip(new, secs)])
        row = {"accuracy": k / len(scores), "low": lo, "high": hi, "tokens_per_s": tps,
               "core_passes_per_token": sum(passes) / max(sum(new), 1), "new_tokens": sum(new) / len(new),
               "wall_s": time.time() - t_row, "engine": "generate" if generate else "nocache-loop"}
        results["rows"][label] = row
        results["rows"][label]["params"] = params
        log(f"{label:<14} acc {row['accuracy']:.3f} [{lo:.3f}, {hi:.3f}]  {tps:7.1f} tok/s  "
            f"{row['core_passes_per_token']:6.2f} passes/tok  ({row['wall_s']:.0f}s)")
    if latent:
        lc = latent_change(model, problems[: min(len(problems), 100)], steps_per_line=trained_layout(path))
        results["latent_change_median"] = lc
        log("median latent change " + "  ".join(f"r={r}: {v:.1e}" for r, v in lc.items()))
    return results


def format_table(results: dict) -> str:
    lines = ["| sampler | accuracy | 95% CI | tokens/s (median) | core passes / token |",
             "|---|---|---|---|---|"]
    for label, r in results["rows"].items():
        lines.append(f"| {label} | {r['accuracy']:.3f} | [{r['low']:.3f}, {r['high']:.3f}] | "
                     f"{r['tokens_per_s']:.1f} | {r['core_passes_per_token']:.2f} |")
    if "latent_change_median" in results:
        lc = results["latent_change_median"]
        lines.append("")
        lines.append("median ‖s_r − s_{r−1}‖/‖s_r‖ over completion positions: " +
                     ", ".join(f"r={r}: {v:.1e}" for r, v in lc.items()))
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--path", default=str(ASSET_DIR))
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--rows", default="all", choices=["all", "static", "samplers", "latent"])
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--static-r", default=None, help="comma list of static r (overrides --rows for static)")
    ap.add_argument("--samplers", default=None, help="comma list of samplers (overrides --rows for samplers)")
    ap.add_argument("--latent", default=None, choices=["yes", "no"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--init-scale", type=float, default=None, help="override α (init_scale) for every row")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--merge", nargs="+", default=None, help="only print the table of these result JSONs merged")
    a = ap.parse_args(argv)
    if a.merge:
        res = {"rows": {}}
        for f in a.merge:
            part = json.loads(Path(f).read_text())
            res["rows"].update(part.get("rows", {}))
            if "latent_change_median" in part:
                res["latent_change_median"] = part["latent_change_median"]
        order = [f"static r={r}" for r in STATIC_RS] + list(SAMPLER_ROWS)
        res["rows"] = {k: res["rows"][k] for k in order if k in res["rows"]}
        print(format_table(res))
        return
    res = evaluate(a.path, a.n, a.rows, a.max_new_tokens, a.offset, log=lambda s: print(s, flush=True),
                   static_rs=None if a.static_r is None else [int(x) for x in a.static_r.split(",") if x],
                   samplers=None if a.samplers is None else [x for x in a.samplers.split(",") if x],
                   latent=None if a.latent is None else a.latent == "yes", threads=a.threads,
                   init_scale=a.init_scale)
    print()
    print(format_table(res))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
