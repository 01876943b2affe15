"""recdiff against the authors' reference implementation: tokens/s side by side in one run, and the ratios.

    python -m recdiff.bench_authors --authors DIR --python PY [--models fixture,random-small] [--threads 1]
                                    [--max-new-tokens 32] [--prompts 5] [--device cuda] [--python-path DIR]

DIR is a checkout of github.com/seal-rg/recurrent-pretraining (commit 59e0b69; only
``recpre/raven_modeling_minimal.py`` and ``recpre/raven_config_minimal.py`` are used, ``recpre/__init__.py`` is
not imported) and PY an interpreter with torch and ``transformers`` 4.x (4.57.6; the reference does not run on 5.x).
The authors' side runs in a subprocess under PY (``recdiff/tools/_authors_worker.py``, which imports nothing from
recdiff); recdiff runs in this process. Both load the same checkpoint folder in the official Hugging Face layout:
the fixture (``shared/fixtures/raven_tiny``), and ``random-small`` — ``recdiff.bench``'s random-weight shape
(width 256, 2/4/2 layers, 7.6M parameters), written to a temporary folder (config.json + model.safetensors with the
persistent ``freqs_cis`` table and no ``lm_head.weight``, as the reference's ``save_pretrained`` writes them).

For each model and sampler, interleaved (the authors' run, then recdiff's eager and compiled runs of the same
sampler, so load on the machine affects both alike): batch 1, greedy, float32 (``--dtype``), on the CPU or, with
``--device cuda``, on the GPU, the same prompt ids (random,
``torch.Generator().manual_seed(0)``, as ``recdiff.bench``), ``max_new_tokens`` new tokens with no stop token,
``init_scale=0`` (α = 0: a zero initial state, so both sides compute the same thing), ``torch.manual_seed(0)``
before every reference call. Each side gets an untimed warm-up on the first prompt (compilation included), then the
median over prompts of new tokens / wall-clock seconds of one call. The reference may return a few more than
``max_new_tokens`` (whole speculative rounds, several freezes in the last diffusion step); both sides are credited
with at most ``max_new_tokens``.

Samplers, as the fixture's ``generate.json`` calls them, and recdiff's equivalent call (as the parity tests map
them, see tests/model/test_forward_parity.py and tests/samplers/test_*_parity.py):

- ``static r=32``: ``generate_minimal(num_steps=32)`` ↔ ``sampler="static", r=32``;
- ``adaptive ε=0.03``: ``generate_with_adaptive_compute(criterion="latent-diff", exit_threshold=0.03,
  num_steps=32)`` ↔ ``sampler="adaptive", r=32, epsilon=0.03``;
- ``speculative 4×4``: ``generate_speculative(draft_steps=4, lookahead_for_draft=4, num_steps=32)`` ↔
  ``sampler="speculative", r=32, r_draft=4, lookahead=4``;
- ``diffusion fixed r'=4`` and ``diffusion adaptive ε=0.03`` (the reference's default freezing, latent-diff):
  ``generate_diffusion_style`` with the fixture's common diffusion arguments (r=32, r'=4, β=0, η=0.1, W=128,
  headway 1, dampened mixer, full prefill) ↔ ``sampler="diffusion"`` with ``adaptive_rule="reference",
  freeze_rule="last", beta_schedule="dampened"`` and, for fixed freezing, ``r_freeze=(r // r' + 2)·r'``.

KV cache (``--kv-cache``, default ``per_step,shared``): the AR samplers run once per policy, the reference's
``full`` (its default for them) ↔ recdiff's ``per_step``, and ``latest-m4-compress-s4`` ↔ ``shared`` (the
fixtures check both for static and adaptive, only ``full`` for speculative); diffusion runs ``shared`` /
``latest-m4-compress-s4`` (the reference's default for it, recdiff's only policy).

On a GPU (``--device cuda``) both sides run on the same device, each call timed between two device synchronisations;
recdiff's compiled mode replays CUDA graphs. ``huginn`` is Huginn-0125's shape with random weights (``recdiff.bench``'s
``huginn``, stored in ``--dtype``). A GPU machine whose transformers is 5.x can run the reference from the same
interpreter with transformers 4.57.6 installed into a folder of its own (``pip install --target DIR
transformers==4.57.6 "tokenizers<0.23" "huggingface_hub<1.0"``): ``--python-path DIR`` puts that folder first on the
worker's path (tests/gpu/README.md).

"tokens agree" compares every generated sequence of the three runs (warm-up included): recdiff's tokens (eager and
compiled) must equal the first ``max_new_tokens`` of the reference's. On random weights a disagreement can come from
a near-tie of two logits; on the fixture every sequence must agree (tests/samplers checks the same on its cases).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from recdiff import generate, load_model
from recdiff.families import config_json
from recdiff.layers import rope_table
from recdiff.model import RecurrentDepthModel
from recdiff.model_config import RecurrentConfig
from recdiff.tools.speed import FIXTURE  # the reference fixture, found as recdiff.bench and the tests find it

WORKER = Path(__file__).with_name("_authors_worker.py")

# the "random-small" shape of recdiff/bench.py (kept in step with it by hand)
RANDOM_SMALL = dict(n_embd=256, n_heads=8, n_layers_in_prelude=2, n_layers_in_recurrent_block=4, n_layers_in_coda=2,
                    intermediate_size=704, vocab_size=4096, block_size=1024)

# the reference's cache names ↔ recdiff's
CACHE = {"full": "per_step", "latest-m4-compress-s4": "shared"}
CACHE_REF = {v: k for k, v in CACHE.items()}

R, R_INNER, EPS = 32, 4, 0.03
DIFFUSION_COMMON = dict(init_scale=0.0, state_noise_mixing=0.0, ema_embeds=0.1, inner_recurrence=R_INNER, num_steps=R,
                        headway=1, cache_lookup_strategy="latest-m4-compress-s4", full_prefill=True,
                        dampened_state_mixer=True, sqrt_mixer=False, continuous_compute=False, max_diffusion_steps=4096,
                        max_wavefront=128)


def diffusion_params(kw: dict[str, Any]) -> dict[str, Any]:
    """recdiff's diffusion parameters for a reference ``generate_diffusion_style`` call (the mapping of
    tests/samplers' parity tests)."""
    fixed = kw["freeze_strategy"] == "fixed"
    r, r_inner = kw["num_steps"], kw["inner_recurrence"]
    return dict(r=r, r_inner=r_inner, freeze="fixed" if fixed else "adaptive", epsilon=kw["exit_t"],
                wavefront=kw["max_wavefront"], headway=kw["headway"], eta=kw["ema_embeds"],
                beta=kw["state_noise_mixing"], init_scale=kw["init_scale"], continuous_compute=kw["continuous_compute"],
                beta_schedule="dampened",
                max_steps=kw["max_diffusion_steps"], r_freeze=(r // r_inner + 2) * r_inner if fixed else None,
                adaptive_rule="reference", freeze_rule="last", kv_cache=CACHE[kw["cache_lookup_strategy"]])


def rows(kv_caches: list[str]) -> list[tuple[str, str, dict, str, dict]]:
    """(label, reference sampler, its kwargs, recdiff sampler, its params) for every benchmarked sampler; the AR
    samplers once per cache policy in ``kv_caches`` (recdiff's names), diffusion with its only policy, shared."""
    out = []
    for label, ref_sampler, ref_kw, sampler, params in [
        ("static r=32", "generate_minimal", dict(num_steps=R), "static", dict(r=R)),
        ("adaptive ε=0.03", "generate_with_adaptive_compute",
         dict(criterion="latent-diff", exit_threshold=EPS, num_steps=R), "adaptive", dict(r=R, epsilon=EPS)),
        ("speculative 4×4", "generate_speculative", dict(draft_steps=4, lookahead_for_draft=4, num_steps=R),
         "speculative", dict(r=R, r_draft=4, lookahead=4)),
    ]:
        for kv in kv_caches:
            out.append((label, ref_sampler, {**ref_kw, "cache_lookup_strategy": CACHE_REF[kv], "init_scale": 0.0},
                        sampler, {**params, "kv_cache": kv, "init_scale": 0.0}))
    fixed = {**DIFFUSION_COMMON, "freeze_strategy": "fixed", "exit_t": EPS}  # exit_t unused in fixed mode
    adaptive = {**DIFFUSION_COMMON, "freeze_strategy": "latent-diff", "exit_t": EPS}
    out.append(("diffusion fixed r'=4", "generate_diffusion_style", fixed, "diffusion", diffusion_params(fixed)))
    out.append(("diffusion adaptive ε=0.03", "generate_diffusion_style", adaptive, "diffusion",
                diffusion_params(adaptive)))
    return out


# ------------------------------------------------------------------------------------------------ checkpoints
def write_random_checkpoint(folder: Path, shape: dict[str, int], seed: int = 0, dtype: str = "float32",
                            device: str = "cpu") -> Path:
    """A random-weight checkpoint (recdiff's init, as recdiff.bench builds it, drawn on ``device``) in the official
    HF layout, stored in ``dtype``, readable by ``recdiff.load_model`` and by the reference's
    ``RavenForCausalLM.from_pretrained``."""
    cfg = RecurrentConfig(**shape)
    with torch.device(device):
        model = RecurrentDepthModel(cfg)
    model.init_weights(seed)
    dt = getattr(torch, dtype)
    sd = {k: v.detach().to(dt).cpu().contiguous() for k, v in model.state_dict().items()}
    del model
    if cfg.tie_embeddings:
        sd.pop("lm_head.weight", None)  # tied to transformer.wte.weight: not stored
    sd["freqs_cis"] = rope_table(cfg.head_dim, cfg.block_size, cfg.rope_base).contiguous()  # persistent there
    config = {
        **config_json(cfg),
        "auto_map": {"AutoConfig": "raven_config_minimal.RavenConfig",
                     "AutoModelForCausalLM": "raven_modeling_minimal.RavenForCausalLM"},
        "activation_checkpoint_impl": "per-iteration", "architecture_class_name": "RecurrentGPT",
        "init_orthogonal": False, "init_strategy": "takase", "padding_multiple": 64,
        "test_time_noise": 0, "test_time_noise_type": "fixed",
        "dtype": dtype, "torch_dtype": dtype, "transformers_version": "4.57.6",
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (folder / "generation_config.json").write_text(json.dumps({"_from_model_config": True,
                                                               "transformers_version": "4.57.6"}, indent=2) + "\n")
    save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def bench_prompts(vocab: int, n: int, length: int) -> list[list[int]]:
    """Random prompt ids, as recdiff.bench draws them for a model without a tokenizer."""
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, vocab, (length,), generator=g).tolist() for _ in range(n)]


# ------------------------------------------------------------------------------------------------ the two sides
class AuthorsProcess:
    """The reference, in a subprocess under another interpreter (recdiff/tools/_authors_worker.py)."""

    def __init__(self, python: str, authors: str, model_dir: Path, threads: int, device: str = "cpu",
                 dtype: str = "float32", python_path: str | None = None) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
               "TRANSFORMERS_VERBOSITY": "error", "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"}
        env.pop("PYTHONPATH", None)
        if python_path:  # e.g. a --target folder with transformers 4.x, ahead of the interpreter's own 5.x
            env["PYTHONPATH"] = python_path
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([python, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True, env=env, cwd=tempfile.gettempdir())
        self.info = self.ask({"op": "load", "authors": authors, "model": str(model_dir), "threads": threads,
                              "device": device, "dtype": dtype})
        if not self.info.get("ok"):
            self.close()
            raise SystemExit(f"the authors' side failed to load {model_dir}: {self.info.get('error')}")

    def ask(self, msg: dict) -> dict:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self.stderr.seek(0)
            tail = self.stderr.read()[-2000:]
            raise SystemExit(f"the authors' worker ({self.proc.args[0]}) exited:\n{tail}")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")  # type: ignore[union-attr]
                self.proc.stdin.flush()  # type: ignore[union-attr]
                self.proc.wait(timeout=30)
            except Exception:
                self.proc.kill()
        self.stderr.close()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_recdiff(model: RecurrentDepthModel, sampler: str, params: dict, prompts: list[list[int]], max_new: int,
                warmup: int) -> dict:
    kw = dict(max_new_tokens=max_new, stop_token_ids=[], **params)
    warm = [generate(model, p, sampler, **kw).tokens for p in prompts[:warmup]]
    runs = []
    for p in prompts:
        _sync(model.device)
        t0 = time.perf_counter()
        res = generate(model, p, sampler, **kw)
        _sync(model.device)
        runs.append({"seconds": time.perf_counter() - t0, "new_tokens": res.tokens})
    return {"ok": True, "warmup": [{"new_tokens": t} for t in warm], "runs": runs}


def tok_s(res: dict, max_new: int) -> float:
    return statistics.median(min(len(r["new_tokens"]), max_new) / r["seconds"] for r in res["runs"])


def sequences(res: dict) -> list[list[int]]:
    return [w["new_tokens"] for w in res["warmup"]] + [r["new_tokens"] for r in res["runs"]]


def agree(ref: dict, ours: dict, max_new: int) -> tuple[int, int]:
    """(sequences equal, sequences compared): ours == the reference's first max_new tokens, all max_new long."""
    pairs = list(zip(sequences(ref), sequences(ours)))
    return sum(len(o) == max_new and o == r[:max_new] for r, o in pairs), len(pairs)


def _fmt(x: float | None, width: int, prec: int = 1) -> str:
    return f"{'—':>{width}s}" if x is None else f"{x:{width}.{prec}f}"


# ------------------------------------------------------------------------------------------------ main
def where(args: argparse.Namespace) -> str:
    if args.device == "cuda":
        return f"{torch.cuda.get_device_name()}, both sides"
    return f"CPU, {args.threads} thread(s)"


def bench_model(name: str, folder: Path, args: argparse.Namespace) -> bool:
    """Benchmark one checkpoint folder; True when every compared sequence agreed."""
    torch.compiler.reset()  # compiled graphs and recompile counts are per process: each model starts afresh
    model = load_model(folder, device=args.device, dtype=args.dtype)
    prompts = bench_prompts(model.config.vocab_size, args.prompts, args.prompt_len)
    authors = AuthorsProcess(args.python, args.authors, folder, args.threads, args.device, args.dtype,
                             args.python_path)
    info = authors.info
    try:
        lost = {k: v for k, v in info["loading_info"].items() if v}
        print(f"\n## {name}: {model.num_parameters() / 1e6:.2f}M parameters (reference: {info['params'] / 1e6:.2f}M), "
              f"{where(args)}, {args.dtype}, batch 1, greedy, {args.max_new_tokens} new tokens, "
              f"prompts of {args.prompt_len} ids, median of {len(prompts)} prompts after {args.warmup} warm-up")
        commit = "59e0b69" if info["blobs_match_59e0b69"] else "NOT 59e0b69: " + json.dumps(info["blob_ids"])
        print(f"   recdiff: torch {torch.__version__}; reference: torch {info['torch']}, transformers "
              f"{info['transformers']}, {info['recpre']} ({commit})" + (f"; loading info {lost}" if lost else ""))
        modes = [m for m in ("eager", "compiled") if m in args.modes.split(",")]
        head = (f"{'sampler':26s} {'cache':>8s} {'authors t/s':>12s}"
                + "".join(f" {'recdiff ' + m + ' t/s':>21s}" for m in modes)
                + "".join(f" {m + '/authors':>16s}" for m in modes) + f" {'tokens agree':>13s}")
        print("   cache: recdiff per_step = the reference's 'full', shared = its 'latest-m4-compress-s4'; ratios are "
              "recdiff t/s / authors t/s (> 1: recdiff faster)")
        print(head)
        print("-" * len(head))
        all_ok, notes = True, []
        for label, ref_sampler, ref_kw, sampler, params in rows(args.kv_cache.split(",")):
            if args.samplers and label not in args.samplers.split(","):
                continue
            # interleaved: the reference, then recdiff, for the same sampler
            ref = authors.ask({"op": "run", "sampler": ref_sampler, "kwargs": ref_kw, "prompts": prompts,
                               "max_new_tokens": args.max_new_tokens, "warmup": args.warmup})
            ours: dict[str, dict] = {}
            for mode in modes:
                try:
                    from recdiff.engine.runner import set_compile

                    set_compile(model, mode == "compiled")
                    ours[mode] = run_recdiff(model, sampler, params, prompts, args.max_new_tokens, args.warmup)
                except Exception as err:  # report it and go on with the other mode / samplers
                    first = str(err).splitlines()[0][:300] if str(err) else ""
                    ours[mode] = {"ok": False, "error": f"{type(err).__name__}: {first}"}
                    notes.append(f"{label}: recdiff {mode} failed: {ours[mode]['error']}")
            a = tok_s(ref, args.max_new_tokens) if ref.get("ok") else None
            if not ref.get("ok"):
                notes.append(f"{label}: the reference fails on this model: {ref.get('error')}")
            rates = {m: tok_s(ours[m], args.max_new_tokens) if ours[m].get("ok") else None for m in modes}
            if ref.get("ok"):
                checks = [agree(ref, ours[m], args.max_new_tokens) for m in modes if ours[m].get("ok")]
                eq, n = sum(c[0] for c in checks), sum(c[1] for c in checks)
                verdict = "yes" if n and eq == n else f"no ({eq}/{n})" if n else "—"
                all_ok &= bool(n) and eq == n
                over = [len(r["new_tokens"]) - args.max_new_tokens for r in ref["runs"]]
                if max(over) > 0:
                    notes.append(f"{label}: the reference returned up to {max(over)} token(s) more than asked "
                                 f"(credited with {args.max_new_tokens})")
            else:
                verdict = "—"
            cache = params.get("kv_cache", "shared")
            print(f"{label:26s} {cache:>8s} {_fmt(a, 12)}" + "".join(f" {_fmt(rates[m], 21)}" for m in modes)
                  + "".join(f" {_fmt(rates[m] / a if a and rates[m] else None, 15, 2)}×" for m in modes)
                  + f" {verdict:>13s}", flush=True)
        print(f"tokens agree: {'yes' if all_ok else 'no'}")
        for n in notes:
            print(f"   note: {n}")
        return all_ok
    finally:
        authors.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m recdiff.bench_authors", description=__doc__.split("\n\n")[0])
    ap.add_argument("--authors", required=True, help="checkout of seal-rg/recurrent-pretraining (commit 59e0b69)")
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter with torch and transformers 4.x (4.57.6) for the reference (default: this one)")
    ap.add_argument("--models", default="fixture,random-small",
                    help="comma list: fixture, random-small, huginn (Huginn-0125's shape, random weights: a GPU's "
                         "size), or checkpoint folders")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads on both sides")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where both sides run")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                    help="both sides' weights (float32: the tokens must agree)")
    ap.add_argument("--python-path", default=None,
                    help="PYTHONPATH of the reference's interpreter, e.g. a folder holding transformers 4.57.6")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=5, help="prompts timed one at a time")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=1, help="untimed warm-up calls (first prompts) per sampler and side")
    ap.add_argument("--samplers", default=None, help="comma list of row labels to run (default: all)")
    ap.add_argument("--modes", default="eager,compiled", help="recdiff modes: eager, compiled")
    ap.add_argument("--kv-cache", default="per_step,shared",
                    help="comma list of cache policies for the AR samplers, recdiff's names: per_step (the "
                         "reference's default 'full') and/or shared ('latest-m4-compress-s4'); diffusion is always "
                         "shared")
    args = ap.parse_args(argv)
    kv = args.kv_cache.split(",")
    if not kv or any(k not in CACHE_REF for k in kv):
        raise SystemExit(f"--kv-cache {args.kv_cache}: give per_step and/or shared")
    if shutil.which(args.python) is None:
        raise SystemExit(f"--python {args.python}: no such interpreter")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available")
    torch.set_num_threads(args.threads)
    ok = True
    with tempfile.TemporaryDirectory(prefix="recdiff-bench-authors-") as tmp:
        for name in args.models.split(","):
            if name == "fixture":
                folder = FIXTURE
            elif name == "random-small":
                folder = write_random_checkpoint(Path(tmp) / name, RANDOM_SMALL)
            elif name == "huginn":
                from recdiff.tools.speed import SHAPES

                folder = write_random_checkpoint(Path(tmp) / name, SHAPES["huginn"], dtype=args.dtype,
                                                 device=args.device)
            else:
                folder = Path(name)
            ok &= bench_model(name, folder, args)
    print(f"\ntokens agree (all models): {'yes' if ok else 'no'}")


if __name__ == "__main__":
    main()
