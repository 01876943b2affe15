"""Throughput benchmark of every sampler, measured side by side in one run (a script, not a test).

    python -m recdiff.bench                          # fixture model + a larger random-weight config, CPU
    python -m recdiff.bench --models embedded        # the shipped trained model (benchmark prompts)
    python -m recdiff.bench --models huginn --device cuda --samplers "static r=32,diffusion fixed r'=4"

For each model and sampler, three ways of running, side by side in one process:

- ``batch-1 eager``: one prompt at a time, plain PyTorch (median over prompts of generated tokens/s, the paper's
  speed metric);
- ``batch-1 compiled``: one prompt at a time, compiled steps (CPU: torch.compile; CUDA: CUDA graphs);
- ``batch-B compiled``: all prompts through ``generate`` with ``batch_size=B`` (continuous batching): generated
  tokens per wall-clock second, a throughput, not a per-sample speed.

Warm-up (compilation, graph capture, allocations) is excluded: compiled modes run the timed work once before
timing it; timers synchronise the device. Also printed: core
passes per token, the diffusion/static-AR (r=32) ratio in each mode next to the ideal (r+1)/(r'+1), and the
KV-cache memory of both cache policies at the same length. And what each mode pays per core row·recurrence (one
position through one recurrence: wall time over the results' ``tokens_forward``) next to the weight products of one
recurrence alone at 1 to 256 rows (:func:`product_floor`): how far a mode is from what this machine's matrix
kernels allow (streaming the weights at batch 1, multiplying them for a wide wavefront or a batch), and so how much
any implementation of the same arithmetic could still gain.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from recdiff import generate, load_model
from recdiff.cache import SlotKV
from recdiff.config import RecurrentConfig
from recdiff.engine.runner import set_compile
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
MODES = ("batch-1 eager", "batch-1 compiled", "batch-B compiled")


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


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(model: RecurrentDepthModel, prompts: list[list[int]], sampler: str, params: dict, max_new: int, mode: str,
        batch: int, warmup: int) -> dict:
    device = model.device
    set_compile(model, mode != "batch-1 eager")
    kw = dict(max_new_tokens=max_new, stop_token_ids=[], **params)
    if mode == "batch-B compiled":
        generate(model, prompts, sampler, batch_size=batch, **kw)  # the same work first: every shape it meets
        _sync(device)
        t0 = time.perf_counter()
        res = generate(model, prompts, sampler, batch_size=batch, **kw)
        _sync(device)
        wall = time.perf_counter() - t0
        n = sum(len(r.tokens) for r in res)
        return {"tok_s": n / wall, "passes": sum(r.stats["core_passes"] for r in res) / n,
                "capped": sum(bool(r.stats.get("max_steps_reached")) for r in res),
                "us_row": wall / sum(r.stats["tokens_forward"] for r in res) * 1e6}
    # compiled: every prompt once first, so no shape the timed run meets compiles inside it (warm-up is paid once
    # per process, as in a sweep); eager: a few prompts (allocator, caches)
    for p in prompts if mode != "batch-1 eager" else prompts[:warmup]:
        generate(model, p, sampler, **kw)
    rates, passes, capped, wall, row_recs = [], [], 0, 0.0, 0
    for p in prompts:
        with Timer(device) as t:
            res = generate(model, p, sampler, **kw)
        n = len(res.tokens)
        rates.append(n / t.seconds)
        passes.append(res.stats["core_passes"] / n)
        capped += bool(res.stats.get("max_steps_reached"))
        wall, row_recs = wall + t.seconds, row_recs + res.stats["tokens_forward"]
    return {"tok_s": statistics.median(rates), "passes": statistics.mean(passes), "capped": capped,
            "us_row": wall / row_recs * 1e6}


FLOOR_ROWS = (1, 8, 32, 256)


def recurrence_matrices(model: RecurrentDepthModel) -> list[torch.Tensor]:
    """One recurrence's weight matrices (the adapter's and the core blocks'), those of one input width stacked."""
    t = model.transformer
    by_width: dict[int, list[torch.Tensor]] = {}
    for w in [t.adapter.weight] + [p for p in t.core_block.parameters() if p.dim() == 2]:
        by_width.setdefault(w.shape[1], []).append(w.detach())
    return [torch.cat(ws) for ws in by_width.values()]


@torch.inference_mode()
def product_floor(model: RecurrentDepthModel, rows: int, repeats: int = 50) -> float:
    """Seconds per row of one recurrence's weight products alone: the adapter and every core block's matrices on
    ``rows`` rows, eagerly (the vendor's GEMM), in the model's dtype and device; no norms, attention or RoPE. The
    matrices that read the same input width are stacked into one, so a recurrence is three products whatever its
    depth: the same bytes and multiplications with few calls. What a core row·recurrence costs at the vendor GEMM's
    rate, a reference point rather than a strict bound (inductor's GEMM template beats it on few rows of a small
    model; on the tiny fixture a call's own few µs weigh in): at one row it is how fast the weights stream from
    memory, at many rows how fast the device multiplies."""
    weights = recurrence_matrices(model)
    xs = [torch.randn(rows, w.shape[1], device=w.device, dtype=w.dtype) for w in weights]

    def once() -> None:
        for x, w in zip(xs, weights):
            torch.nn.functional.linear(x, w)

    once()
    best = float("inf")
    for _ in range(repeats):
        with Timer(model.device) as timer:
            once()
        best = min(best, timer.seconds)
    return best / rows


def bench_prompts(model: RecurrentDepthModel, n: int, length: int) -> list[list[int]]:
    if model.tokenizer is not None:  # a trained model: real benchmark prompts, so samplers behave as in sweeps
        from recdiff.benchmarks import checkpoint_task, get_benchmark

        bench = get_benchmark(checkpoint_task(model.source), limit=n)
        return [model.tokenizer(bench.render(p, model.tokenizer))["input_ids"] for p in bench.problems()]
    g = torch.Generator().manual_seed(0)  # random weights: random prompts
    return [torch.randint(0, model.config.vocab_size, (length,), generator=g).tolist() for _ in range(n)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="fixture,random-small", help="comma list: fixture, embedded, random-small, huginn, or a folder")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, choices=[None, "float32", "bfloat16"])
    ap.add_argument("--prompts", type=int, default=5, help="prompts timed one at a time (batch-1 modes)")
    ap.add_argument("--batch", type=int, default=32, help="B of the batch-B mode, which runs 2·B prompts")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (tiny models run fastest on one)")
    ap.add_argument("--samplers", default=None, help="comma list of row labels to run (default: all)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma list of: " + ", ".join(MODES))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [s for s in SAMPLERS if args.samplers is None or s[0] in args.samplers.split(",")]
    modes = [m for m in MODES if m in args.modes.split(",")]
    for name in args.models.split(","):
        model = build(name, args.device, args.dtype)
        prompts = bench_prompts(model, args.prompts, args.prompt_len)
        many = bench_prompts(model, 2 * args.batch, args.prompt_len) if "batch-B compiled" in modes else prompts
        dev = torch.device(args.device)
        where = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"CPU, {args.threads} thread(s)"
        print(f"\n## {name}: {model.num_parameters() / 1e6:.2f}M parameters, {where}, {next(model.parameters()).dtype}, "
              f"{args.max_new_tokens} new tokens; batch-1: median of {len(prompts)} prompts; batch-B: B={args.batch}, "
              f"{len(many)} prompts")
        head = f"{'sampler':24s}" + "".join(f" {m + ' t/s':>22s}" for m in modes) + f" {'passes/token':>13s} {'capped':>7s}"
        print(head)
        results: dict[str, dict[str, dict]] = {}
        for label, sampler, params in rows:
            res = results[label] = {}
            for mode in modes:
                res[mode] = run(model, many if mode == "batch-B compiled" else prompts, sampler, params,
                                args.max_new_tokens, mode, args.batch, args.warmup)
            first = res[modes[0]]
            print(f"{label:24s}" + "".join(f" {res[m]['tok_s']:22.1f}" for m in modes)
                  + f" {first['passes']:13.2f} {first['capped']:7d}", flush=True)
        floors = "  ".join(f"{r} row{'s' * (r > 1)}: {product_floor(model, r) * 1e6:.2f}" for r in FLOOR_ROWS)
        print(f"cost per core row·recurrence, µs (wall time / the results' tokens_forward, prefill included; P, C and "
              f"the sampler's own work are in it too):")
        for label in results:
            print(f"  {label:22s}" + "".join(f" {m}: {results[label][m]['us_row']:.2f}" for m in modes))
        print(f"  the weight products alone at the vendor GEMM's rate (bench.product_floor), by rows per call — {floors}")
        if "static r=32" in results:
            for label in ("diffusion defaults", "diffusion fixed r'=4"):
                if label in results:
                    ratios = "  ".join(f"{m}: {results[label][m]['tok_s'] / results['static r=32'][m]['tok_s']:.2f}x"
                                       for m in modes)
                    print(f"ratio {label} / static r=32 — {ratios} (ideal (r+1)/(r'+1) = {33 / 5:.2f}x)")
            if len(modes) > 1:
                for label in ("static r=32", "diffusion defaults", "diffusion fixed r'=4"):
                    if label in results:
                        base = results[label][modes[0]]["tok_s"]
                        print(f"speed-up over {modes[0]}, {label}: " + "  ".join(
                            f"{m}: {results[label][m]['tok_s'] / base:.2f}x" for m in modes[1:]))
        length = max(len(p) for p in prompts) + args.max_new_tokens
        kv = {pol: SlotKV(model.config, 1, length, pol, max_steps=32, device="meta",
                          dtype=next(model.parameters()).dtype).nbytes() for pol in ("shared", "per_step")}
        print(f"KV cache at {length} positions, r=32: shared {kv['shared'] / 2**20:.2f} MiB, "
              f"per_step {kv['per_step'] / 2**20:.2f} MiB ({kv['per_step'] / kv['shared']:.1f}x)")


if __name__ == "__main__":
    main()
