"""Batched and batch-1 decoding side by side on a benchmark slice: how many completions agree, and accuracy.

    python -m recdiff.tools.agreement                       # embedded model, 200 of its benchmark's problems, B=32
    python -m recdiff.tools.agreement --n 200 --batch 32 --samplers static,diffusion

Batched decoding is exact by construction (each sequence its own row, positions, cache and random stream); what
can differ is floating-point rounding, since matrix products over 32 rows may sum in another order than over one.
That can only flip a greedy choice whose two best logits are (nearly) tied, or a δ that sits at ε. For every
disagreement this prints the first differing token and the logit margin of the batch-1 run at that position,
recomputed without a cache at the sampler's r: a margin near zero is such a near-tie.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

ASSET = Path(__file__).resolve().parents[1] / "assets" / "embedded"
ROWS: dict[str, dict[str, Any]] = {
    "static": {"r": 32},
    "adaptive": {"r": 32, "epsilon": 0.03},
    "speculative": {"r": 32, "r_draft": 4, "lookahead": 4},
    "diffusion": {"r": 32, "r_inner": 4, "epsilon": 0.03, "beta": 0.0, "eta": 0.1, "wavefront": 128},
}


def margin_at(model: Any, ids: list[int], r: int) -> float:
    """Top-1 minus top-2 logit of the next token after ``ids`` (no cache, r recurrences)."""
    with torch.inference_mode():
        logits, _ = model(torch.tensor([ids], device=model.device), r=r)
    top = logits[0, -1].float().topk(2).values
    return float(top[0] - top[1])


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where two completions differ (the shorter one's length where one extends the other); None
    when they are equal."""
    if a == b:
        return None
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def compare(model: Any, bench: Any, problems: list[Any], sampler: str, params: dict[str, Any], batch: int,
            max_new_tokens: int) -> dict[str, Any]:
    from recdiff import generate

    tok = model.tokenizer
    prompts = [tok(bench.render(p, tok))["input_ids"] for p in problems]
    kw = dict(max_new_tokens=max_new_tokens,
              stop_token_ids=[tok.eos_token_id] if tok.eos_token_id is not None else None, **params)
    together = generate(model, prompts, sampler, batch_size=batch, **kw)
    alone = [generate(model, p, sampler, **kw) for p in prompts]
    acc = {}
    for name, runs in (("batched", together), ("alone", alone)):
        scores = bench.score_all(problems, [tok.decode(r.tokens) for r in runs])
        acc[name] = sum(s.correct for s in scores) / len(problems)
    diffs = []
    for i, (a, b) in enumerate(zip(alone, together)):
        j = first_difference(a.tokens, b.tokens)
        if j is not None:
            diffs.append({"problem": i, "position": j,
                          "margin": margin_at(model, prompts[i] + a.tokens[:j], params["r"])})
    return {"sampler": sampler, "n": len(problems), "agree": len(problems) - len(diffs), "acc": acc, "diffs": diffs}


def main(argv: list[str] | None = None) -> None:
    from recdiff import load_model
    from recdiff.benchmarks import checkpoint_task, get_benchmark

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--path", default=str(ASSET))
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--samplers", default=",".join(ROWS))
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = load_model(args.path)
    bench = get_benchmark(checkpoint_task(args.path), limit=args.n)
    problems = list(bench.problems())
    print(f"{'sampler':12s} {'agree':>9s} {'acc batched':>12s} {'acc alone':>10s}  "
          "disagreements (problem, position, margin)")
    for name in args.samplers.split(","):
        res = compare(model, bench, problems, name, ROWS[name], args.batch, args.max_new_tokens)
        d = ", ".join(f"({x['problem']}, {x['position']}, {x['margin']:.2e})" for x in res["diffs"])
        print(f"{name:12s} {res['agree']:4d}/{res['n']:<4d} {res['acc']['batched']:12.3f} "
              f"{res['acc']['alone']:10.3f}  {d}", flush=True)


if __name__ == "__main__":
    main()
