"""``python -m recdiff.tools.kernels``: where a decoding step's device time goes, by kernel kind.

Runs a sampler on a bench model (``recdiff.bench``'s shapes, random weights) with compiled steps, then a few more
tokens under ``torch.profiler`` and prints the device time per step by kind of kernel (weight products, fused
elementwise kernels, attention, cache writes, copies, the rest) and the largest kernels by name. What the bench's
``% bound`` leaves unexplained (the gap between a step and its bytes over the bandwidth) is found here.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from recdiff import generate
from recdiff.engine.runner import set_compile
from recdiff.errors import RecdiffError
from recdiff.tools.speed import bench_prompts, build

KINDS = [  # first match wins, on the lower-cased kernel name
    ("products", r"gemm|gemv|cutlass|sm\d+_xmma|ampere|hopper|cublas|nvjet|splitk|^aten::(mm|addmm|bmm)$"),
    ("attention", r"flash|fmha|attention|efficient|softmax"),
    ("fused (inductor)", r"^triton_"),
    ("cache writes", r"index_put|scatter|indexing_backward"),
    ("copies", r"copy|memcpy|memset|cat|fill"),
]


def kind(name: str) -> str:
    low = name.lower()
    return next((k for k, pattern in KINDS if re.search(pattern, low)), "other elementwise")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m recdiff.tools.kernels", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="huginn", help="a bench model: huginn, random-small, embedded, fixture")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--sampler", default="static", choices=["static", "diffusion"])
    ap.add_argument("--r", type=int, default=32)
    ap.add_argument("--r-inner", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=8, help="new tokens profiled (after as many unprofiled)")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args(argv)
    model = build(a.models, a.device, None)
    set_compile(model, a.compile)
    params = {"r": a.r} if a.sampler == "static" else {"r": a.r, "r_inner": a.r_inner, "freeze": "fixed"}
    prompt = bench_prompts(model, 1, 32)[0]
    kw = dict(max_new_tokens=a.tokens, stop_token_ids=[], **params)
    generate(model, prompt, a.sampler, **kw)  # warm-up: every graph and kernel this run meets
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if a.device == "cuda" else [])
    with profile(activities=activities) as prof:
        result = generate(model, prompt, a.sampler, **kw)
        if a.device == "cuda":
            torch.cuda.synchronize()
    steps = max(1, int(result.stats.get("steps", a.tokens)))
    by_kind: dict[str, float] = defaultdict(float)
    by_name: dict[str, list] = defaultdict(lambda: [0.0, 0])
    for ev in prof.events():
        if a.device == "cuda" and ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = ev.device_time if a.device == "cuda" else ev.self_cpu_time_total
        if a.device != "cuda" and not ev.name.startswith("aten::"):
            continue
        by_kind[kind(ev.name)] += us
        by_name[ev.name][0] += us
        by_name[ev.name][1] += 1
    total = sum(by_kind.values())
    print(f"{a.models} {a.sampler} {params} compile={a.compile} on {a.device}: {steps} steps profiled, "
          f"device time {total / steps / 1000:.3f} ms/step, "
          f"kernels {sum(n for _, n in by_name.values()) / steps:.0f}/step")
    for k, us in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"  {k:<20} {us / steps / 1000:8.3f} ms/step  {100 * us / total:5.1f}%")
    print("largest kernels (device µs per step, launches per step):")
    for name, (us, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[: a.top]:
        print(f"  {us / steps:9.1f} µs  {n / steps:6.1f}x  {kind(name):<18} {name[:110]}")


if __name__ == "__main__":
    try:
        main()
    except RecdiffError as e:  # bad input (a model name): one line, no traceback
        raise SystemExit(f"error: {e}") from None
