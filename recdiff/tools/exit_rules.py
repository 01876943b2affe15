"""What an exit gate's adaptive compute costs in accuracy and buys in speed, against the reference's computation.

    python -m recdiff.tools.exit_rules tests/fixtures/ouro_tiny/*   # any folders of models with an exit gate

The Ouro reference computes every loop of every token and only reads each token out at its exit loop (recdiff:
``static`` with ``exit_threshold``). Adaptive compute stops a token at its exit (``adaptive`` with
``exit_threshold``); later tokens then meet, at the loops it skipped, either nothing (``exit_kv=mask``) or its last
loop's K/V (``exit_kv=copy``). For each rule and threshold q this prints, over random prompts of each folder, greedy:
the share of continuations equal to the reference's, the tokens before the first difference, core passes per token,
and the paired speed-up over the reference (interleaved rounds in this process, median with a 95% interval).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from recdiff import generate, load_model
from recdiff.timing import Timer, median_interval

RULES = [("reference (every loop)", "static", {}), ("stop, mask", "adaptive", {"exit_kv": "mask"}),
         ("stop, copy", "adaptive", {"exit_kv": "copy"})]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m recdiff.tools.exit_rules", description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--thresholds", default="0.5,0.7,0.9")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(f"{'folder':22s} {'q':>4s} {'rule':24s} {'same':>6s} {'agree':>6s} {'passes/tok':>10s} {'speed-up':>22s}")
    for folder in args.folders:
        model = load_model(folder)
        S = model.config.mean_recurrence
        g = torch.Generator().manual_seed(0)
        prompts = [torch.randint(0, model.config.vocab_size, (int(n),), generator=g).tolist()
                   for n in torch.randint(4, 24, (args.prompts,), generator=g)]
        for q in map(float, args.thresholds.split(",")):
            runs = {name: lambda p, s=s, kw=kw: generate(model, p, s, max_new_tokens=args.new, r=S, exit_threshold=q,
                                                          kv_cache="per_step", stop_token_ids=[], **kw)
                    for name, s, kw in RULES}
            out = {name: [run(p) for p in prompts] for name, run in runs.items()}
            ref = out[RULES[0][0]]
            ratios: dict[str, list[float]] = {name: [] for name in runs}
            for _ in range(args.rounds):   # interleaved: every rule of a prompt back to back
                for p in prompts:
                    secs = {}
                    for name, run in runs.items():
                        with Timer() as t:
                            run(p)
                        secs[name] = t.seconds
                    for name in runs:
                        ratios[name].append(secs[RULES[0][0]] / secs[name])
            for name in runs:
                got = out[name]
                same = sum(a.tokens == b.tokens for a, b in zip(got, ref)) / len(ref)
                agree = sum(next((i for i, (x, y) in enumerate(zip(a.tokens, b.tokens)) if x != y), len(b.tokens))
                            for a, b in zip(got, ref)) / len(ref)
                passes = sum(r.stats["core_passes"] for r in got) / sum(len(r.tokens) for r in got)
                med, lo, hi = median_interval(ratios[name])
                print(f"{folder.name:22s} {q:4.2f} {name:24s} {same:6.2f} {agree:6.1f} {passes:10.2f} "
                      f"{med:6.2f}x [{lo:.2f}, {hi:.2f}]")


if __name__ == "__main__":
    main()
