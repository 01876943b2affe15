"""Runs the authors' reference samplers for ``python -m recdiff.bench_authors`` (a standalone script).

It runs under another interpreter: one that has ``transformers`` 4.x (the reference does not run on 5.x) and
torch. It imports nothing from recdiff, so that environment needs no recdiff dependencies. The reference code is
``recpre/raven_modeling_minimal.py`` + ``recpre/raven_config_minimal.py`` of github.com/seal-rg/recurrent-pretraining
(commit 59e0b69) in a checkout given at run time; recdiff does not ship it. The two files are loaded as a package
of their own, so the checkout's ``recpre/__init__.py`` (training dependencies) is never imported.

Protocol: one JSON object per line on stdin, one JSON object per line back on stdout (whatever the reference or
transformers print goes to stderr):

- ``{"op": "load", "authors": DIR, "model": FOLDER, "threads": 1, "device": "cpu", "dtype": "float32"}`` →
  versions, blob ids of the two files, parameter count, ``from_pretrained``'s loading info (``device``: ``cpu`` or
  ``cuda``, where the model and the prompts live; each call is then timed between two device synchronisations);
- ``{"op": "run", "sampler": "generate_minimal", "kwargs": {...}, "prompts": [[ids], ...],
  "max_new_tokens": 32, "warmup": 1}`` → per prompt: seconds and new tokens (the warm-up calls, on the first
  ``warmup`` prompts, are not timed); ``torch.manual_seed(0)`` before every call, greedy, no stop tokens;
- ``{"op": "quit"}``.

A failing request answers ``{"ok": false, "error": "Type: message"}`` and the worker goes on.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
import time
import traceback
import types
from pathlib import Path

# git blob ids of the two files at commit 59e0b69 (what the fixtures in shared/fixtures/raven_tiny were made with)
EXPECTED_BLOBS = {
    "raven_modeling_minimal.py": "0e83a0766644df9113a8923f43350c6a1b5a182c",
    "raven_config_minimal.py": "3d02eb20e5e248bd3edfe2454bde0e4d448aaffe",
}
SAMPLERS = ("generate_minimal", "generate_with_adaptive_compute", "generate_speculative", "generate_diffusion_style")
_PKG = "_recdiff_authors_recpre"


def blob_id(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def find_recpre(authors: str) -> Path:
    root = Path(authors).expanduser()
    for cand in (root / "recpre", root):
        if (cand / "raven_modeling_minimal.py").is_file() and (cand / "raven_config_minimal.py").is_file():
            return cand
    raise FileNotFoundError(f"{root} has no recpre/raven_modeling_minimal.py and recpre/raven_config_minimal.py")


class Worker:
    def __init__(self) -> None:
        self.model = None
        self.torch = None
        self.device = None
        self.GenerationConfig = None

    def load(self, msg: dict) -> dict:
        threads = int(msg.get("threads", 1))
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        import torch
        import transformers

        if int(transformers.__version__.split(".")[0]) >= 5:
            raise RuntimeError(
                f"this interpreter ({sys.executable}) has transformers {transformers.__version__}; the reference needs "
                "4.x (4.57.6): pass --python with an interpreter of such an environment"
            )
        torch.set_num_threads(threads)
        recpre = find_recpre(msg["authors"])
        pkg = types.ModuleType(_PKG)
        pkg.__path__ = [str(recpre)]  # a package of just these files: recpre/__init__.py is not run
        sys.modules[_PKG] = pkg
        cfg_mod = importlib.import_module(f"{_PKG}.raven_config_minimal")
        mod = importlib.import_module(f"{_PKG}.raven_modeling_minimal")
        folder = msg["model"]
        config = cfg_mod.RavenConfig.from_pretrained(folder)
        model, info = mod.RavenForCausalLM.from_pretrained(folder, config=config, output_loading_info=True)
        self.device = torch.device(msg.get("device", "cpu"))
        model = model.to(device=self.device, dtype=getattr(torch, msg.get("dtype", "float32"))).eval()
        self.model, self.torch = model, torch
        self.GenerationConfig = transformers.GenerationConfig
        blobs = {name: blob_id(recpre / name) for name in EXPECTED_BLOBS}
        return {
            "ok": True,
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "recpre": str(recpre),
            "blob_ids": blobs,
            "blobs_match_59e0b69": blobs == EXPECTED_BLOBS,
            "params": sum(p.numel() for p in model.parameters()),
            "dtype": str(next(model.parameters()).dtype),
            "device": torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu",
            "threads": torch.get_num_threads(),
            "loading_info": {k: sorted(map(str, v)) for k, v in info.items()},
        }

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def _call(self, sampler: str, prompt: list[int], kwargs: dict, max_new: int):
        torch = self.torch
        gen_cfg = self.GenerationConfig(do_sample=False, return_dict_in_generate=True)
        ids = torch.tensor([prompt], dtype=torch.long, device=self.device)
        torch.manual_seed(0)
        self._sync()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = getattr(self.model, sampler)(ids, gen_cfg, max_new_tokens=max_new, **kwargs)
        self._sync()
        seconds = time.perf_counter() - t0
        seq = out.sequences if hasattr(out, "sequences") else out
        new = seq[0, len(prompt):].tolist()
        stats = {}
        scores = getattr(out, "scores", None)
        if isinstance(scores, dict):  # the diffusion sampler's summary scores
            for k in ("num_core_forward_passes", "diffusion_steps", "num_standing_waves"):
                if k in scores:
                    v = scores[k]
                    stats[k] = v.item() if hasattr(v, "item") else v
        return seconds, new, stats

    def run(self, msg: dict) -> dict:
        if self.model is None:
            raise RuntimeError("no model loaded (send op=load first)")
        sampler = msg["sampler"]
        if sampler not in SAMPLERS:
            raise ValueError(f"unknown sampler {sampler!r}; choose one of {', '.join(SAMPLERS)}")
        prompts, kwargs, max_new = msg["prompts"], dict(msg.get("kwargs", {})), int(msg["max_new_tokens"])
        warm = []
        for p in prompts[: int(msg.get("warmup", 1))]:
            s, new, _ = self._call(sampler, p, kwargs, max_new)
            warm.append({"seconds": s, "new_tokens": new})
        runs = []
        for p in prompts:
            s, new, stats = self._call(sampler, p, kwargs, max_new)
            runs.append({"seconds": s, "new_tokens": new, "stats": stats})
        return {"ok": True, "warmup": warm, "runs": runs}


def main() -> None:
    proto = os.fdopen(os.dup(1), "w", buffering=1)  # the protocol channel; everything else printed → stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    worker = Worker()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            msg = json.loads(line)
            op = msg.get("op")
            if op == "quit":
                break
            if op == "load":
                reply = worker.load(msg)
            elif op == "run":
                reply = worker.run(msg)
            else:
                raise ValueError(f"unknown op {op!r}")
        except Exception as err:  # report and go on: one failing sampler must not end the benchmark
            reply = {"ok": False, "error": f"{type(err).__name__}: {err}".strip().splitlines()[0][:500],
                     "traceback": traceback.format_exc()[-4000:]}
        proto.write(json.dumps(reply) + "\n")
        proto.flush()


if __name__ == "__main__":
    main()
