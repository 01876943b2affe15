"""Throughput benchmark of every sampler, measured side by side in one run (a script, not a test).

    python -m recdiff.bench                          # fixture model + a larger random-weight config, CPU
    python -m recdiff.bench --models embedded        # the shipped trained model (benchmark prompts)
    python -m recdiff.bench --models huginn --device cuda --samplers "static r=32,diffusion fixed r'=4"
    python -m recdiff.bench --models embedded --max-new-tokens 27 --profile   # where each step's time goes

For each model and sampler, three ways of running by default, side by side in one process:

- ``batch-1 eager``: one prompt at a time, plain PyTorch (median over prompts of generated tokens/s, the paper's
  speed metric);
- ``batch-1 compiled``: one prompt at a time, compiled steps (CPU: torch.compile; CUDA: CUDA graphs);
- ``batch-B compiled``: all prompts through ``generate`` with ``batch_size=B`` (continuous batching): generated
  tokens per wall-clock second, a throughput, not a per-sample speed (``batch-B eager``, asked for with ``--modes``:
  the same, eager).

Warm-up (compilation, graph capture, allocations) is excluded: compiled modes run the timed work once before
timing it; timers synchronise the device. Also printed: core passes per token, the diffusion/static-AR (r=32) ratio
in each mode next to the ideal (r+1)/(r'+1), and LoopSpec's (batch-1: the paired speed-up with its 95% interval,
timed as a sweep's trial times it, :func:`recdiff.timing.paired_timing`), and the KV-cache memory of both cache
policies at the same length. And what each mode pays per core row·recurrence (one position through one recurrence:
wall time over the results' ``tokens_forward``) next to the weight products of one recurrence alone at 1 to 256 rows
(:func:`recdiff.tools.bounds.product_floor`): how far a mode is from what this machine's matrix kernels allow
(streaming the weights at batch 1, multiplying them for a wide wavefront or a batch), and so how much any
implementation of the same arithmetic could still gain.

On a GPU (``--bound``, on by default with ``--device cuda``) it also prints how close each sampler and mode comes
to the memory-bandwidth bound (:mod:`recdiff.tools.bounds`): the bytes its model calls must read from device
memory (the weights once per call — P and C once, R once per recurrence, the head's full matrix — plus the K/V of
every attended position in every attention layer pass) over the copy bandwidth measured in the same run. ``% bound``
is that bound's share reached: bytes that had to be read per second ÷ the copy bandwidth. Huginn-0125 in bf16 reads
~109 GB per static r=32 token and ~17 GB per diffusion step at r' = 4.

``--profile`` times every run under the step profile (:mod:`recdiff.tools.profile`) and prints, per sampler and
mode, a step's share in model calls (P, R, C) and outside them (the sampler's own work, on the device and the host)
and its host reads of device values. With static r=32 and the diffusion defaults both in batch-1 eager it also
prints the *bookkeeping-free bound*: static r=32's time per answer ÷ the time diffusion's answers spend in model
calls (prefill included), the ratio diffusion would reach if all its other work cost nothing, next to the ratio
measured (its share of the bound is diffusion's share of time in model calls).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from recdiff import generate, load_model
from recdiff.cache import SlotKV
from recdiff.engine.runner import set_compile
from recdiff.model import RecurrentDepthModel
from recdiff.model_config import RecurrentConfig
from recdiff.samplers.ar import ARBatch
from recdiff.samplers.diffusion import DiffusionBatch
from recdiff.samplers.loopspec import LoopSpecBatch
from recdiff.samplers.speculative import SpeculativeBatch
from recdiff.timing import PairedTiming, Timer, paired_timing
from recdiff.tools.bounds import (
    FLOOR_ROWS,
    ReadBytes,
    copy_bandwidth,
    model_calls,
    product_floor,
    read_bytes,
    result_bytes,
)
from recdiff.tools.profile import profiling
from recdiff.tools.shapes import SHAPES  # the random-weight shapes --models names

EMBEDDED = Path(__file__).resolve().parents[1] / "assets" / "embedded"


def _shared() -> Path:
    """The folder whose ``fixtures/raven_tiny`` the bench reads, found as the tests find it: ``RECDIFF_SHARED``; else
    ``../shared`` beside the checkout where it holds the fixtures; else ``shared/`` inside it (a git-ignored copy, as on
    the GPU machine); else the copy that travels with the repository, ``tests/fixtures``."""
    repo = Path(__file__).resolve().parents[2]
    if "RECDIFF_SHARED" in os.environ:
        return Path(os.environ["RECDIFF_SHARED"])
    for folder in (repo.parent / "shared", repo / "shared"):
        if (folder / "fixtures" / "raven_tiny" / "config.json").is_file():
            return folder
    return repo / "tests"


FIXTURE = _shared() / "fixtures" / "raven_tiny"

def rows_at(R: int = 32) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, sampler, params) of every row at depth R (``--depth``: 32, Huginn's; 8 for Parcae, its trained
    mean): static AR at R (every ratio's baseline) and R/4, adaptive compute, speculative decoding with drafts of R/8,
    the diffusion sampler with the paper's defaults (ε=0.03, β=0, η=0.1, r'=4 or R if less, wavefront 128), fixed
    freezing, a wavefront of 32, and LoopSpec (K = R/8, with a second readout at 2K)."""
    inner, k = min(4, R), max(1, R // 8)
    rows: list[tuple[str, str, dict[str, Any]]] = [
        (f"static r={R}", "static", {"r": R}),
        (f"static r={max(1, R // 4)}", "static", {"r": max(1, R // 4)}),
        ("adaptive ε=0.03", "adaptive", {"r": R, "epsilon": 0.03}),
        (f"speculative {k}×4", "speculative", {"r": R, "r_draft": k, "lookahead": 4}),
        ("diffusion defaults", "diffusion",
         {"r": R, "r_inner": inner, "epsilon": 0.03, "beta": 0.0, "eta": 0.1, "wavefront": 128}),
        (f"diffusion fixed r'={inner}", "diffusion",
         {"r": R, "r_inner": inner, "freeze": "fixed", "eta": 0.1, "wavefront": 128}),
        # the defaults with a narrower wavefront: at batch B a step iterates up to B·W positions
        ("diffusion defaults W=32", "diffusion",
         {"r": R, "r_inner": inner, "epsilon": 0.03, "beta": 0.0, "eta": 0.1, "wavefront": 32}),
        # LoopSpec (the baseline of every grid study), with a second readout at K·X
        (f"loopspec K={k}", "loopspec", {"r": R, "r_draft": k}),
    ]
    if 2 * k < R:
        rows.append((f"loopspec K={k} X=2", "loopspec", {"r": R, "r_draft": k, "r_draft2": 2 * k}))
    return rows


MODES = ("batch-1 eager", "batch-1 compiled", "batch-B eager", "batch-B compiled")
CPU_MODES = ("batch-1 eager", "batch-1 compiled", "batch-B compiled")  # the default modes on a CPU
GPU_MODES = ("batch-1 compiled", "batch-B compiled")  # the default modes on a GPU (eager: --modes)
STEP_CLASSES = (ARBatch, SpeculativeBatch, DiffusionBatch, LoopSpecBatch)  # every sampler's batch state (--profile)


def build(name: str, device: str, dtype: str | None) -> RecurrentDepthModel:
    if name in SHAPES:
        cfg = RecurrentConfig(**SHAPES[name])
        dt = {"bfloat16": torch.bfloat16, "float32": torch.float32,
              None: torch.bfloat16 if device == "cuda" else torch.float32}[dtype]
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
        batch: int, warmup: int, bound: tuple[ReadBytes, float] | None = None, profile: bool = False) -> dict:
    """One sampler in one mode: tokens/s, passes per token, capped runs, µs per core row·recurrence; with ``bound``
    (the model's :class:`~recdiff.tools.bounds.ReadBytes`, the copy bandwidth in bytes/s) also ``frac`` (share of
    the bandwidth bound reached; batch-1: the median prompt's), ``gb_call`` (GB a model call must read, on average)
    and ``calls_s`` (model calls per second); batch-B counts a call of B sequences as one
    (:func:`~recdiff.tools.bounds.result_bytes`). With ``profile`` the timed work runs under
    :func:`recdiff.tools.profile.profiling`: ``profile`` (its :class:`~recdiff.tools.profile.Profile`), ``wall``
    (seconds timed) and, batch-1, ``model_fracs`` (each prompt's share of its time in model calls)."""
    device = model.device
    set_compile(model, mode.endswith("compiled"))
    kw = dict(max_new_tokens=max_new, stop_token_ids=[], **params)
    watch = (lambda: profiling(STEP_CLASSES, device)) if profile else (lambda: contextlib.nullcontext(None))
    if mode.startswith("batch-B"):
        generate(model, prompts, sampler, batch_size=batch, **kw)  # the same work first: every shape it meets
        _sync(device)
        with watch() as prof:
            t0 = time.perf_counter()
            res = generate(model, prompts, sampler, batch_size=batch, **kw)
            _sync(device)
            wall = time.perf_counter() - t0
        n = sum(len(r.tokens) for r in res)
        out = {"tok_s": n / wall, "passes": sum(r.stats["core_passes"] for r in res) / n,
               "capped": sum(bool(r.stats.get("max_steps_reached")) for r in res),
               "us_row": wall / sum(r.stats["tokens_forward"] for r in res) * 1e6, "profile": prof, "wall": wall}
        if bound:
            rb, bw = bound
            need = result_bytes(rb, res, [len(p) for p in prompts], sampler, params, batch)
            calls = sum(model_calls(sampler, r.stats, params) for r in res) / batch  # batched calls, at least
            out.update(frac=need / wall / bw, gb_call=need / calls / 1e9, calls_s=calls / wall)
        return out
    # compiled: every prompt once first, so no shape the timed run meets compiles inside it (warm-up is paid once
    # per process, as in a sweep); eager: a few prompts (allocator, caches)
    for p in prompts if mode != "batch-1 eager" else prompts[:warmup]:
        generate(model, p, sampler, **kw)
    rates, passes, capped, wall, row_recs = [], [], 0, 0.0, 0
    fracs, need, calls, model_fracs = [], 0.0, 0, []
    with watch() as prof:
        for p in prompts:
            model_before = prof.model_s if prof else 0.0
            with Timer(device) as t:
                res = generate(model, p, sampler, **kw)
            if prof:
                model_fracs.append((prof.model_s - model_before) / t.seconds)
            n = len(res.tokens)
            rates.append(n / t.seconds)
            passes.append(res.stats["core_passes"] / n)
            capped += bool(res.stats.get("max_steps_reached"))
            wall, row_recs = wall + t.seconds, row_recs + res.stats["tokens_forward"]
            if bound:
                b = result_bytes(bound[0], [res], [len(p)], sampler, params)
                fracs.append(b / t.seconds / bound[1])
                need, calls = need + b, calls + model_calls(sampler, res.stats, params)
    out = {"tok_s": statistics.median(rates), "passes": statistics.mean(passes), "capped": capped,
           "us_row": wall / row_recs * 1e6, "profile": prof, "wall": wall, "model_fracs": model_fracs}
    if bound:  # the median prompt's share of its bound, as tokens/s is the median prompt's rate
        out.update(frac=statistics.median(fracs), gb_call=need / calls / 1e9, calls_s=calls / wall)
    return out


def _rounds(text: str) -> int:
    """``--repeats``: an interval needs two rounds."""
    if not text.isdigit() or int(text) < 2:
        raise argparse.ArgumentTypeError(f"{text!r} must be an integer >= 2")
    return int(text)


def paired_ratio(model: RecurrentDepthModel, prompts: list[list[int]], sampler: str, params: dict, max_new: int,
                 mode: str, repeats: int, warmup: int) -> PairedTiming:
    """Batch-1 speed-up of ``sampler`` over static AR at its depth in ``mode``, timed as a sweep's trial times it
    (:func:`recdiff.timing.paired_timing`: the two alternate on the same prompts, in rounds), so that a load that
    comes and goes between two separately timed rows does not enter the ratio."""
    set_compile(model, mode != "batch-1 eager")
    kw = dict(max_new_tokens=max_new, stop_token_ids=[])

    def alone(name: str, p: dict) -> Any:
        return lambda i: len(generate(model, prompts[i], name, **kw, **p).tokens)
    return paired_timing(alone(sampler, params), alone("static", {"r": params["r"]}), len(prompts), rounds=repeats,
                         warmup=warmup, device=model.device)


def ratio(model: RecurrentDepthModel, prompts: list[list[int]], label: str, results: dict[str, dict[str, dict]],
          mode: str, args: argparse.Namespace) -> str:
    """One mode's ratio of ``label`` to static AR at the same depth (``--depth``): batch-1 paired, with its 95%
    interval; batch-B (a throughput) the two rows' tokens/s divided."""
    _, sampler, params = next(s for s in rows_at(args.depth) if s[0] == label)
    if mode.startswith("batch-1"):
        t = paired_ratio(model, prompts, sampler, params, args.max_new_tokens, mode, args.repeats, args.warmup)
        return f"{mode}: {t.speedup:.2f}x [{t.speedup_lo:.2f}, {t.speedup_hi:.2f}]"
    base = results[f"static r={params['r']}"][mode]["tok_s"]
    return f"{mode}: {results[label][mode]['tok_s'] / base:.2f}x"


def print_profile(results: dict[str, dict[str, dict]], modes: list[str], n_prompts: int, base: str) -> None:
    """The step profile of every sampler and mode, and the bookkeeping-free bound of batch-1 eager diffusion."""
    print("step profile (every run above was timed under it): a step is one sampler step over the occupied slots "
          "(a token of static and adaptive AR, a round of speculative decoding, a diffusion step); model: its share "
          "in P, R and C calls; own: the rest, the sampler's own work (device and host); both of the step without "
          "the profile's own bookkeeping, which it times itself (profile: its share of the step as timed); reads: "
          "host reads of a device value per step")
    print(f"{'sampler':24s} {'mode':18s} {'steps':>7s} {'ms/step':>8s} {'model':>7s} {'own':>7s} {'profile':>8s} "
          f"{'reads/step':>11s}")
    for label in results:
        for m in modes:
            p = results[label][m]["profile"]
            print(f"{label:24s} {m:18s} {p.steps:7d} {p.ms_per_step:8.3f} {100 * (1 - p.own_share):6.1f}% "
                  f"{100 * p.own_share:6.1f}% {100 * p.tool_share:7.1f}% {p.reads_per_step:11.2f}")
    static, diffusion = results.get(base, {}), results.get("diffusion defaults", {})
    if "batch-1 eager" in static and "batch-1 eager" in diffusion:
        s, d = static["batch-1 eager"], diffusion["batch-1 eager"]
        t_static, t_diff = s["wall"] / n_prompts, d["wall"] / n_prompts
        t_model = d["profile"].model_s / n_prompts
        fr = sorted(d["model_fracs"])
        print(f"bookkeeping-free bound, batch-1 eager: {base} {1e3 * t_static:.1f} ms per answer ÷ diffusion "
              f"defaults' model calls {1e3 * t_model:.1f} ms per answer (prefill included) = {t_static / t_model:.2f}x"
              f"; measured {t_static / t_diff:.2f}x = {100 * t_model / t_diff:.1f}% of the bound "
              f"(per prompt: median {100 * statistics.median(fr):.1f}%, {100 * fr[0]:.1f}-{100 * fr[-1]:.1f}%)")


def bench_prompts(model: RecurrentDepthModel, n: int, length: int) -> list[list[int]]:
    if model.tokenizer is not None:  # a trained model: real benchmark prompts, so samplers behave as in sweeps
        from recdiff.benchmarks import checkpoint_task, get_benchmark

        bench = get_benchmark(checkpoint_task(model.source), limit=n)
        return [model.tokenizer(bench.render(p, model.tokenizer))["input_ids"] for p in bench.problems()]
    g = torch.Generator().manual_seed(0)  # random weights: random prompts
    return [torch.randint(0, model.config.vocab_size, (length,), generator=g).tolist() for _ in range(n)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m recdiff.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="fixture,random-small",
                    help="comma list: fixture, embedded, a shape of random weights (" + ", ".join(SHAPES) + "), or a "
                         "checkpoint folder of any model family")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, choices=[None, "float32", "bfloat16"])
    ap.add_argument("--prompts", type=int, default=5, help="prompts timed one at a time (batch-1 modes)")
    ap.add_argument("--repeats", type=_rounds, default=3, help="rounds of the paired batch-1 ratio to static AR")
    ap.add_argument("--depth", type=int, default=32,
                    help="R of every row and of the static AR every ratio is paired with (Huginn: 32; Parcae: 8)")
    ap.add_argument("--batch", type=int, default=32, help="B of the batch-B mode, which runs 2·B prompts")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (tiny models run fastest on one)")
    ap.add_argument("--samplers", default=None, help="comma list of row labels to run (default: all)")
    ap.add_argument("--modes", default=None,
                    help="comma list of: " + ", ".join(MODES)
                    + " (default: all; on a GPU: " + ", ".join(GPU_MODES) + ")")
    ap.add_argument("--batch-prompts", type=int, default=None, help="prompts of the batch-B mode (default: 2·B)")
    ap.add_argument("--bound", action=argparse.BooleanOptionalAction, default=None,
                    help="measure the copy bandwidth and print each mode's share of the bandwidth bound (default: on "
                         "a GPU)")
    ap.add_argument("--profile", action="store_true",
                    help="time every run under the step profile (recdiff.tools.profile): each sampler step's share in "
                         "model calls and outside them, host reads per step; with static r=32 and diffusion defaults "
                         "in batch-1 eager, diffusion's share of its bookkeeping-free bound")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    if args.depth < 2:
        ap.error(f"--depth {args.depth}: give 2 or more")
    rows = [s for s in rows_at(args.depth) if args.samplers is None or s[0] in args.samplers.split(",")]
    base = f"static r={args.depth}"
    default = GPU_MODES if dev.type == "cuda" else CPU_MODES
    modes = [m for m in MODES if m in (args.modes.split(",") if args.modes else default)]
    with_bound = dev.type == "cuda" if args.bound is None else args.bound
    for name in args.models.split(","):
        model = build(name, args.device, args.dtype)
        prompts = bench_prompts(model, args.prompts, args.prompt_len)
        many = (bench_prompts(model, args.batch_prompts or 2 * args.batch, args.prompt_len)
                if any(m.startswith("batch-B") for m in modes) else prompts)
        where = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"CPU, {args.threads} thread(s)"
        print(f"\n## {name}: {model.num_parameters() / 1e6:.2f}M parameters, {where}, "
              f"{next(model.parameters()).dtype}, {args.max_new_tokens} new tokens; batch-1: median of {len(prompts)} "
              f"prompts; batch-B: B={args.batch}, {len(many)} prompts")
        bound = None
        if with_bound:
            rb, copy_bytes = read_bytes(model), (2 << 30) if dev.type == "cuda" else (256 << 20)
            bw = copy_bandwidth(dev, copy_bytes)
            bound = (rb, bw)
            print(f"bandwidth: a {dev.type} copy of {copy_bytes / 2**30:g} GiB moves {bw / 1e9:.0f} GB/s (bytes read "
                  f"+ written, best of 10); a model call reads P+C {(rb.prelude + rb.coda) / 1e9:.3f} GB, "
                  f"one recurrence {rb.core / 1e9:.3f} GB, K/V {rb.kv / 1e3:.2f} kB per position and attention layer "
                  f"(static r={args.depth}: {rb.call(args.depth) / 1e9:.2f} GB per token, r'={min(4, args.depth)}: "
                  f"{rb.call(min(4, args.depth)) / 1e9:.2f} GB per step, "
                  f"without K/V)")
        head = (f"{'sampler':24s}" + "".join(f" {m + ' t/s':>22s}" for m in modes)
                + f" {'passes/token':>13s} {'capped':>7s}")
        print(head)
        results: dict[str, dict[str, dict]] = {}
        for label, sampler, params in rows:
            res = results[label] = {}
            for mode in modes:
                res[mode] = run(model, many if mode.startswith("batch-B") else prompts, sampler, params,
                                args.max_new_tokens, mode, args.batch, args.warmup, bound, args.profile)
            first = res[modes[0]]
            print(f"{label:24s}" + "".join(f" {res[m]['tok_s']:22.1f}" for m in modes)
                  + f" {first['passes']:13.2f} {first['capped']:7d}", flush=True)
        if bound:
            print("bandwidth bound (bytes the model calls must read: weights, plus K/V; over the copy bandwidth "
                  "above); a call is a token of static and adaptive AR, a diffusion step, a speculative draft or "
                  "verification, a LoopSpec cycle (its K core calls read R's weights once each for all lanes); "
                  "batch-B: a call of B sequences, the weights read once for them; batch-1 % bound: the median "
                  "prompt's)")
            print(f"{'sampler':24s}"
                  + "".join(f" {m + ': GB/call':>28s} {'calls/s':>9s} {'% bound':>8s}" for m in modes))
            for label in results:
                print(f"{label:24s}" + "".join(
                    f" {results[label][m]['gb_call']:28.4g} {results[label][m]['calls_s']:9.1f} "
                    f"{100 * results[label][m]['frac']:7.1f}%" for m in modes))
        if args.profile:
            print_profile(results, modes, len(prompts), base)
        floors = "  ".join(f"{r} row{'s' * (r > 1)}: {product_floor(model, r) * 1e6:.2f}" for r in FLOOR_ROWS)
        print("cost per core row·recurrence, µs (wall time / the results' tokens_forward, prefill included; P, C and "
              "the sampler's own work are in it too):")
        for label in results:
            print(f"  {label:22s}" + "".join(f" {m}: {results[label][m]['us_row']:.2f}" for m in modes))
        print("  the weight products alone at the vendor GEMM's rate (bounds.product_floor), by rows per call — "
              f"{floors}")
        inner = min(4, args.depth)
        diffusion_rows = ("diffusion defaults", f"diffusion fixed r'={inner}")
        if base in results:
            for label in diffusion_rows:
                if label in results:
                    ratios = "  ".join(ratio(model, prompts, label, results, m, args) for m in modes)
                    ideal = (args.depth + 1) / (inner + 1)
                    print(f"ratio {label} / {base} — {ratios} (ideal (r+1)/(r'+1) = {ideal:.2f}x)")
            for label in (s[0] for s in rows if s[1] == "loopspec"):
                ratios = "  ".join(ratio(model, prompts, label, results, m, args) for m in modes)
                print(f"ratio {label} / {base} — {ratios} (lossless: the same tokens, each after as few as "
                      "r_draft sequential recurrences)")
            if len(modes) > 1:
                for label in (base, *diffusion_rows):
                    if label in results:
                        base = results[label][modes[0]]["tok_s"]
                        print(f"speed-up over {modes[0]}, {label}: " + "  ".join(
                            f"{m}: {results[label][m]['tok_s'] / base:.2f}x" for m in modes[1:]))
        length = max(len(p) for p in prompts) + args.max_new_tokens
        kv = {pol: SlotKV(model.config, 1, length, pol, max_steps=args.depth, device="meta",
                          dtype=next(model.parameters()).dtype).nbytes() for pol in ("shared", "per_step")}
        print(f"KV cache at {length} positions, r={args.depth}: shared {kv['shared'] / 2**20:.2f} MiB, "
              f"per_step {kv['per_step'] / 2**20:.2f} MiB ({kv['per_step'] / kv['shared']:.1f}x)")


if __name__ == "__main__":
    main()
