"""Throughput benchmark of every sampler, measured side by side in one run (a script, not a test).

    python -m recdiff.bench                          # fixture model + a larger random-weight config, CPU
    python -m recdiff.bench --models embedded        # the shipped trained model
    python -m recdiff.bench --models huginn --device cuda --dtype bfloat16   # Huginn-0125 shapes, random weights

For each model: median tokens/s over several prompts (generated tokens only, warm-up excluded, device-synchronised
timers), core passes per token, the ratio of the diffusion sampler at the paper's defaults to static AR at r=32 next
to the ideal (r+1)/(r'+1), and the KV-cache memory of both cache policies at the same length.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

import torch

from recdiff import generate, load_model
from recdiff.cache import KVCache
from recdiff.config import RecurrentConfig
from recdiff.model import RecurrentDepthModel
from recdiff.timing import Timer

EMBEDDED = Path(__file__).parent / "assets" / "embedded"
FIXTURE = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "raven_tiny"

SHAPES = {
    "random-small": dict(n_embd=256, n_heads=8, n_layers_in_prelude=2, n_layers_in_recurrent_block=4, n_layers_in_coda=2,
                         intermediate_size=704, vocab_size=4096, block_size=1024),
    "huginn": dict(n_embd=5280, n_heads=55, n_layers_in_prelude=2, n_layers_in_recurrent_block=4, n_layers_in_coda=2,
                   intermediate_size=17920, vocab_size=65536, block_size=4096),
}

# (label, sampler, params); the diffusion rows use the paper's defaults (ε=0.03, β=0, η=0.1, r'=4, wavefront 128)
SAMPLERS: list[tuple[str, str, dict[str, Any]]] = [
    ("static r=32", "static", {"r": 32}),
    ("static r=8", "static", {"r": 8}),
    ("adaptive ε=0.03", "adaptive", {"r": 32, "epsilon": 0.03}),
    ("speculative 4×4", "speculative", {"r": 32, "r_draft": 4, "lookahead": 4}),
    ("diffusion defaults", "diffusion", {"r": 32, "r_inner": 4, "epsilon": 0.03, "beta": 0.0, "eta": 0.1, "wavefront": 128}),
    ("diffusion fixed r'=4", "diffusion", {"r": 32, "r_inner": 4, "freeze": "fixed", "eta": 0.1, "wavefront": 128}),
]


def build(name: str, device: str, dtype: str | None) -> RecurrentDepthModel:
    if name in SHAPES:
        cfg = RecurrentConfig(**SHAPES[name])
        dt = {"bfloat16": torch.bfloat16, "float32": torch.float32, None: torch.bfloat16 if device == "cuda" else torch.float32}[dtype]
        with torch.device(device):
            model = RecurrentDepthModel(cfg)
        model.init_weights(0)
        return model.to(dt).eval().requires_grad_(False)
    path = {"embedded": EMBEDDED, "fixture": FIXTURE}.get(name, Path(name))
    return load_model(path, device=device, dtype=dtype)


def run(model: RecurrentDepthModel, prompts: list[list[int]], sampler: str, params: dict, max_new: int, warmup: int) -> dict:
    device = model.device
    for p in prompts[:warmup]:
        generate(model, p, sampler, max_new_tokens=max_new, stop_token_ids=[], **params)
    rates, passes, tokens, capped = [], [], [], 0
    for p in prompts:
        with Timer(device) as t:
            res = generate(model, p, sampler, max_new_tokens=max_new, stop_token_ids=[], **params)
        n = len(res.tokens)
        rates.append(n / t.seconds)
        passes.append(res.stats["core_passes"] / n)
        tokens.append(n)
        capped += bool(res.stats.get("max_steps_reached"))
    return {"tok_s": statistics.median(rates), "passes": statistics.mean(passes), "tokens": statistics.mean(tokens), "capped": capped}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="fixture,random-small", help="comma list: fixture, embedded, random-small, huginn, or a folder")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, choices=[None, "float32", "bfloat16"])
    ap.add_argument("--prompts", type=int, default=5)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (tiny models run fastest on one)")
    ap.add_argument("--samplers", default=None, help="comma list of row labels to run (default: all)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [s for s in SAMPLERS if args.samplers is None or s[0] in args.samplers.split(",")]
    for name in args.models.split(","):
        model = build(name, args.device, args.dtype)
        if model.tokenizer is not None:  # a trained model: real benchmark prompts, so samplers behave as in sweeps
            from recdiff.benchmarks import get_benchmark

            bench = get_benchmark("arith", limit=args.prompts)
            prompts = [model.tokenizer(bench.render(p, model.tokenizer))["input_ids"] for p in bench.problems()]
        else:  # random weights: random prompts
            g = torch.Generator().manual_seed(0)
            prompts = [torch.randint(0, model.config.vocab_size, (args.prompt_len,), generator=g).tolist()
                       for _ in range(args.prompts)]
        print(f"\n## {name}: {model.num_parameters() / 1e6:.2f}M parameters, {args.device}, "
              f"{next(model.parameters()).dtype}, {args.prompts} prompts × {args.max_new_tokens} new tokens")
        print(f"{'sampler':24s} {'tokens/s':>10s} {'core passes/token':>18s} {'tokens':>7s} {'step cap hit':>12s}")
        results = {}
        for label, sampler, params in rows:
            r = results[label] = run(model, prompts, sampler, params, args.max_new_tokens, args.warmup)
            print(f"{label:24s} {r['tok_s']:10.1f} {r['passes']:18.2f} {r['tokens']:7.1f} {r['capped']:12d}")
        if "static r=32" in results:
            base = results["static r=32"]["tok_s"]
            for label in ("diffusion defaults", "diffusion fixed r'=4"):
                if label in results:
                    print(f"ratio {label} / static r=32: {results[label]['tok_s'] / base:.2f}x "
                          f"(ideal (r+1)/(r'+1) = {33 / 5:.2f}x)")
        length = max(len(p) for p in prompts) + args.max_new_tokens
        kv = {pol: KVCache(model.config, length, pol, max_steps=32, device="meta", dtype=next(model.parameters()).dtype).nbytes()
              for pol in ("shared", "per_step")}
        print(f"KV cache at {length} positions, r=32: shared {kv['shared'] / 2**20:.2f} MiB, "
              f"per_step {kv['per_step'] / 2**20:.2f} MiB ({kv['per_step'] / kv['shared']:.1f}x)")


if __name__ == "__main__":
    main()
