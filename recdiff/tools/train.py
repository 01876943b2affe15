"""Training recipe of the embedded recurrent-depth model (``python -m recdiff.tools.train``).

Huginn's recipe at toy scale:
- the same architecture (:class:`recdiff.model.RecurrentDepthModel`: prelude / core / coda, input injection
  through the adapter, sandwich norms, takase init);
- randomized unrolling: per step the number of recurrences is ``p = Poisson(LogNormal(mu, 0.5)) + 1`` with
  ``mu = log(mean_recurrence) - 0.5**2/2``; the first ``max(p - k, 0)`` recurrences run without gradient,
  the last ``min(k, p)`` with gradient (truncated backpropagation, ``k = mean_backprop_depth``);
- random initial states (``init_scale`` α = 1);
- AdamW, trapezoid learning rate (linear warm-up, constant, linear cool-down), gradient clipping.
Data (``data.task``): an endless stream of train-split problems of an embedded benchmark, loss on the completion
tokens only (solution + EOS); the test split is disjoint by construction. Each task's data lives next to its
benchmark (``TrainingData`` in the benchmark's module, listed in :data:`recdiff.tools.train_data.TASKS`):
- ``compose`` (the default model, ``conf/train/compose.yaml``): compositions of fixed digit permutations
  (:mod:`recdiff.benchmarks.compose`), byte-level tokenizer without merges; curriculum on K (below);
- ``arith`` (the previous model, ``conf/train/embedded_arith.yaml``): word problems with solutions written
  ``data.steps_per_line`` sentences per line; byte-level BPE (single-digit tokens) trained on the first
  ``tokenizer.corpus`` train problems; curriculum on the layout (:mod:`recdiff.benchmarks.arith`).
Adaptive curriculum (tasks with a ``threshold``): the *level* (compose: the largest K) starts at
``data.curriculum_start`` and goes up by one whenever the running exact match of the training batches reaches
``data.curriculum_threshold`` — a level is learned before the next begins.
Checkpoints are written atomically every ``checkpoint_every_s`` seconds in the official layout (``config.json``,
``model.safetensors``, ``tokenizer.json``).

The schedule's progress is ``max(step / max_steps, elapsed / time_budget_s)``: a run under a wall-clock
budget still cools down before its deadline (the step count reached is logged and written to the run's
``train_state.json``).

``init_from`` continues from a checkpoint folder (its weights, architecture and tokenizer; the schedule restarts, and
the recurrence draws ``model.mean_recurrence`` / ``mean_backprop_depth`` are this stage's), i.e. a later stage of a
multi-stage run (set ``data.curriculum_start`` to the level the previous stage reached).

On a GPU (``device=cuda``) batches are built by ``train.loader_workers`` background processes and matrix products
use TF32.

Hydra config: ``conf/train/compose.yaml`` (``--config-name`` picks another file in ``conf/train/``).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from recdiff.families import config_json
from recdiff.model import RecurrentDepthModel
from recdiff.model_config import RecurrentConfig
from recdiff.tools.train_data import Batches, Encoder, LevelCurriculum, make_task

DEFAULTS: dict[str, Any] = {  # conf/train/compose.yaml, the shipped model's recipe
    "seed": 0,
    "data_seed": 0,
    "threads": "auto",
    "device": "cpu",
    "out_dir": "outputs/train/compose",
    "init_from": None,
    "model": {
        "n_embd": 128, "n_heads": 4, "num_key_value_heads": 4,
        "n_layers_in_prelude": 1, "n_layers_in_recurrent_block": 1, "n_layers_in_coda": 1,
        "intermediate_size": 352, "block_size": 128, "mean_recurrence": 12, "mean_backprop_depth": 4,
        "rope_base": 50000.0, "qk_bias": True, "bias": False, "tie_embeddings": True,
    },
    "data": {"task": "compose", "format": "direct", "max_k": 24, "curriculum_start": 2, "curriculum_threshold": 0.8},
    "tokenizer": {},
    "train": {
        "batch_size": 64, "lr": 2e-3, "min_lr_frac": 0.0, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95,
        "grad_clip": 1.0, "warmup_steps": 50, "cooldown_frac": 0.2, "max_steps": 1000000,
        "time_budget_s": 1200.0, "init_scale": 1.0, "lognormal_sigma": 0.5, "log_every": 25,
        "checkpoint_every_s": 120.0, "eval_every_s": 300.0, "eval_n": 480, "eval_r": [1, 2, 4, 8, 16, 32, 64],
        "loader_workers": 0,
    },
}


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in (over or {}).items():
        out[k] = _merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return out


# ------------------------------------------------------------------------------------------------ threads
class ThreadTuner:
    """``threads: auto``: on a shared CPU two intra-op threads can be several times slower than one (each
    waits for the other at every kernel), so every ``period`` steps both settings are timed on a few steps
    and the faster one is kept until the next probe.  An integer pins the thread count."""

    def __init__(self, threads, period: int = 100, probe: int = 6) -> None:
        self.auto = threads in ("auto", None)
        self.max = max(1, min(2, torch.get_num_threads())) if self.auto else int(threads)
        self.period, self.probe = period, probe
        self.times: dict[int, list[float]] = {}
        self.best = self.max
        torch.set_num_threads(self.max)

    def _phase(self, step: int) -> int | None:
        k = step % self.period
        if not self.auto or self.max == 1 or k >= 2 * self.probe:
            return None
        return 1 if k < self.probe else self.max

    def before(self, step: int) -> None:
        ph = self._phase(step)
        torch.set_num_threads(ph if ph is not None else self.best)

    def after(self, step: int, seconds: float) -> None:
        ph = self._phase(step)
        if ph is None:
            return
        k = step % self.period
        if k in (0, self.probe):  # first step of a probe window pays the switch; skip it
            self.times[ph] = []
            return
        self.times.setdefault(ph, []).append(seconds)
        if k == 2 * self.probe - 1 and all(self.times.get(t) for t in (1, self.max)):
            self.best = min((1, self.max), key=lambda t: sorted(self.times[t])[len(self.times[t]) // 2])


# ------------------------------------------------------------------------------------------------ sampling
def sample_recurrence(mean_recurrence: int, backprop_depth: int, gen: torch.Generator,
                      sigma: float = 0.5) -> tuple[int, int]:
    """Huginn's Poisson-lognormal draw → (r_no_grad, r_grad); ``r_no_grad + r_grad = p >= 1``."""
    mu = math.log(max(mean_recurrence, 1)) - sigma**2 / 2
    rate = math.exp(mu + sigma * float(torch.randn((), generator=gen)))
    p = int(torch.poisson(torch.tensor([rate]), generator=gen).item()) + 1
    return max(p - backprop_depth, 0), min(backprop_depth, p)


def lr_factor(progress: float, step: int, warmup: int, cooldown_frac: float, min_frac: float) -> float:
    if step < warmup:
        return (step + 1) / warmup
    if progress >= 1.0:
        return min_frac
    start = 1.0 - cooldown_frac
    if progress <= start:
        return 1.0
    return min_frac + (1 - min_frac) * (1.0 - progress) / cooldown_frac


def completion_loss(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean CE of predicting ids[:, t] from position t-1, over completion tokens."""
    lg = logits[:, :-1].reshape(-1, logits.shape[-1])
    tgt = ids[:, 1:].reshape(-1)
    m = mask[:, 1:].reshape(-1)
    return F.cross_entropy(lg[m], tgt[m])


@torch.no_grad()
def teacher_forced_accuracy(model, enc: Encoder, problems, r: int, seed: int = 0, batch_size: int = 64,
                            difficulty: Any = None) -> dict:
    """Exact-match of the whole completion under teacher forcing at r recurrences (greedy decode reproduces the
    reference solution iff every argmax matches), the mean per-token accuracy and, with ``difficulty`` (problem →
    int), exact match per difficulty."""
    model.eval()
    dev = model.freqs_cis.device
    exact: list[bool] = []
    tok_ok, tok_n, loss_sum = 0, 0, 0.0
    gen = torch.Generator(device=dev).manual_seed(seed)
    for i in range(0, len(problems), batch_size):
        ids, mask = enc.batch(problems[i : i + batch_size])
        ids, mask = ids.to(dev), mask.to(dev)
        logits, _ = model.forward(ids, r=r, init_scale=1.0, generator=gen)
        pred = logits[:, :-1].argmax(-1)
        m = mask[:, 1:]
        ok = (pred == ids[:, 1:]) | ~m
        exact += ok.all(dim=1).tolist()
        tok_ok += int(((pred == ids[:, 1:]) & m).sum())
        tok_n += int(m.sum())
        loss_sum += float(completion_loss(logits, ids, mask)) * len(problems[i : i + batch_size])
    model.train()
    out = {"exact": sum(exact) / len(problems), "token_acc": tok_ok / tok_n, "loss": loss_sum / len(problems)}
    if difficulty is not None:
        by: dict[int, list[bool]] = {}
        for p, e in zip(problems, exact):
            by.setdefault(difficulty(p), []).append(e)
        out["by_difficulty"] = {k: sum(v) / len(v) for k, v in sorted(by.items())}
    return out


# ------------------------------------------------------------------------------------------------ checkpoint
def save_checkpoint(model: RecurrentDepthModel, tok, folder: str | Path, extra: dict | None = None,
                    task: Any = None) -> None:
    """Atomic: write a sibling temp folder, then swap it in (with what the task writes of itself, e.g. the
    compose permutations)."""
    from recdiff.tokenizer import save_tokenizer

    folder = Path(folder)
    tmp = folder.with_name(folder.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        from recdiff.checkpoint import save_pretrained  # the lead's writer (official names)
        save_pretrained(model, tmp)
    except ImportError:
        _save_fallback(model, tmp)
    save_tokenizer(tok, tmp, model_max_length=model.config.block_size)
    cfg_path = tmp / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["eos_token_id"] = tok.token_to_id("<|end_of_text|>")
    cfg["pad_token_id"] = tok.token_to_id("<|pad|>")
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    gen_cfg = {"eos_token_id": cfg["eos_token_id"], "pad_token_id": cfg["pad_token_id"], "do_sample": False,
               "max_new_tokens": 64}
    (tmp / "generation_config.json").write_text(json.dumps(gen_cfg, indent=2) + "\n")
    if task is not None and hasattr(task, "save"):
        task.save(tmp)
    if extra is not None:
        (tmp / "train_state.json").write_text(json.dumps(extra, indent=2) + "\n")
    old = folder.with_name(folder.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if folder.exists():
        os.replace(folder, old)
    os.replace(tmp, folder)
    if old.exists():
        shutil.rmtree(old)


def _save_fallback(model: RecurrentDepthModel, folder: Path) -> None:
    from safetensors.torch import save_file

    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_embeddings:
        sd.pop("lm_head.weight", None)
    save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config_json(model.config), indent=2) + "\n")


# ------------------------------------------------------------------------------------------------ main loop
def build_model(cfg: dict, vocab_size: int) -> RecurrentDepthModel:
    m = dict(cfg["model"])
    padded = int(math.ceil(vocab_size / 64) * 64)
    config = RecurrentConfig.from_dict({**m, "vocab_size": padded, "padded_vocab_size": padded})
    model = RecurrentDepthModel(config)
    model.init_weights(int(cfg["seed"]))
    return model


def _eval_line(res: dict) -> str:
    parts = []
    for r, v in res.items():
        by = v.get("by_difficulty")
        groups = ""
        if by:  # a few difficulty bands, so the log shows where depth pays
            keys = sorted(by)
            bands = [keys[i : i + max(1, len(keys) // 4)] for i in range(0, len(keys), max(1, len(keys) // 4))]
            groups = " [" + " ".join(f"{b[0]}-{b[-1]}:{sum(by[k] for k in b) / len(b):.2f}" for b in bands) + "]"
        parts.append(f"r={r}: exact {v['exact']:.3f} tok {v['token_acc']:.3f} loss {v['loss']:.3f}{groups}")
    return "eval " + " | ".join(parts)


def run_training(overrides: dict | None = None, log=print) -> dict:
    cfg = _merge(DEFAULTS, overrides or {})
    tc = cfg["train"]
    task_name = str(cfg["data"].get("task", "compose"))
    task = make_task(cfg)
    threads = ThreadTuner(cfg["threads"])
    torch.manual_seed(int(cfg["seed"]))
    out_dir = Path(cfg["out_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)

    if cfg.get("init_from"):  # continue from a checkpoint (a curriculum stage): its weights, architecture, tokenizer
        from recdiff.checkpoint import load_model

        model = load_model(cfg["init_from"]).requires_grad_(True)
        tok = model.tokenizer.backend_tokenizer
        c = model.config
        # the architecture is the checkpoint's; the recurrence draws are this stage's (written into its checkpoints)
        c.mean_recurrence = int(cfg["model"]["mean_recurrence"])
        c.mean_backprop_depth = int(cfg["model"]["mean_backprop_depth"])
        cfg["model"] = {**cfg["model"], **{k: getattr(c, k) for k in cfg["model"] if hasattr(c, k)}}
    else:
        tok = task.tokenizer()
        model = build_model(cfg, tok.get_vocab_size())
    enc = Encoder(tok, task)
    dev = str(cfg.get("device", "cpu"))
    if dev == "auto":
        dev = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(dev)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    model.to(device)
    model.freqs_cis = model.freqs_cis.to(device)
    model.train()
    log(f"model: {model.num_parameters():,} parameters, vocab {tok.get_vocab_size()}, task {task_name}, "
        f"device {device}, config {cfg['model']}")

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "wte" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "wte" not in n)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": float(tc["weight_decay"])}, {"params": no_decay, "weight_decay": 0.0}],
        lr=float(tc["lr"]), betas=(float(tc["beta1"]), float(tc["beta2"])),
    )
    gen = torch.Generator().manual_seed(int(cfg["seed"]) + 1)
    import multiprocessing as mp

    progress_value = mp.get_context("fork").Value("d", 0.0, lock=False)
    level = mp.get_context("fork").Value("i", int(cfg["data"]["curriculum_start"]), lock=False)
    curriculum = (LevelCurriculum(level, task.threshold, task.max_level) if getattr(task, "threshold", 0.0) > 0
                  else None)
    workers = int(tc.get("loader_workers", 0))
    batches = iter(torch.utils.data.DataLoader(
        Batches(task, enc, int(tc["batch_size"]), progress_value, level), batch_size=None, num_workers=workers,
        pin_memory=device.type == "cuda", prefetch_factor=8 if workers else None,
        multiprocessing_context="fork" if workers else None))
    eval_problems = task.eval_problems(int(tc["eval_n"]))

    t0 = time.time()
    last_ckpt = t0
    last_eval = t0
    history: list[dict] = []
    ema = None
    step = 0
    max_steps, budget = int(tc["max_steps"]), float(tc["time_budget_s"])
    mean_r, k = int(cfg["model"]["mean_recurrence"]), int(cfg["model"]["mean_backprop_depth"])
    state = {}
    while True:
        elapsed = time.time() - t0
        progress = max(step / max_steps, elapsed / budget if budget > 0 else 0.0)
        if progress >= 1.0:
            break
        progress_value.value = progress
        f = lr_factor(progress, step, int(tc["warmup_steps"]), float(tc["cooldown_frac"]), float(tc["min_lr_frac"]))
        for g in opt.param_groups:
            g["lr"] = float(tc["lr"]) * f
        threads.before(step)
        t_step = time.perf_counter()
        ids, mask = next(batches)
        ids, mask = ids.to(device, non_blocking=True), mask.to(device, non_blocking=True)
        r_ng, r_g = sample_recurrence(mean_r, k, gen, float(tc["lognormal_sigma"]))
        logits = model.forward_train(ids, r_ng, r_g, init_scale=float(tc["init_scale"]))
        loss = completion_loss(logits, ids, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), float(tc["grad_clip"]))
        opt.step()
        threads.after(step, time.perf_counter() - t_step)
        step += 1
        if curriculum is not None:  # teacher-forced exact match of this batch
            with torch.no_grad():
                exact = float((((logits[:, :-1].argmax(-1) == ids[:, 1:]) | ~mask[:, 1:]).all(dim=1)).float().mean())
            if curriculum.update(exact):
                log(f"step {step}: curriculum level K<={level.value}")
        lv = loss.item()
        ema = lv if ema is None else 0.98 * ema + 0.02 * lv
        history.append({"step": step, "loss": lv, "r": r_ng + r_g})
        state = {"step": step, "elapsed_s": round(time.time() - t0, 1), "loss_ema": ema,
                 "lr": opt.param_groups[0]["lr"], "seed": cfg["seed"], "data_seed": cfg["data_seed"],
                 "curriculum_level": level.value, "config": cfg}
        if step % int(tc["log_every"]) == 0:
            extra = f" level {level.value} batch exact {curriculum.ema:.2f}" if curriculum is not None else ""
            log(f"step {step} t={time.time() - t0:.0f}s loss {lv:.4f} ema {ema:.4f} r={r_ng + r_g} "
                f"lr {opt.param_groups[0]['lr']:.2e} gnorm {float(gn):.2f} {step / (time.time() - t0):.2f} it/s "
                f"threads {torch.get_num_threads()}{extra}")
        now = time.time()
        if float(tc["eval_every_s"]) > 0 and now - last_eval >= float(tc["eval_every_s"]):
            res = {r: teacher_forced_accuracy(model, enc, eval_problems, r, difficulty=task.difficulty)
                   for r in tc["eval_r"]}
            log(_eval_line(res))
            last_eval = time.time()
        if float(tc["checkpoint_every_s"]) > 0 and now - last_ckpt >= float(tc["checkpoint_every_s"]):
            save_checkpoint(model, tok, out_dir / "latest", extra=state, task=task)
            last_ckpt = time.time()
            log(f"checkpoint step {step} -> {out_dir / 'latest'}")
    save_checkpoint(model, tok, out_dir / "final", extra=state, task=task)
    save_checkpoint(model, tok, out_dir / "latest", extra=state, task=task)
    log(f"done: {step} steps in {time.time() - t0:.0f}s -> {out_dir / 'final'}")
    if float(tc["eval_every_s"]) > 0:
        res = {r: teacher_forced_accuracy(model, enc, eval_problems, r, difficulty=task.difficulty)
               for r in tc["eval_r"]}
        log("final " + _eval_line(res))
    return {"history": history, "steps": step, "model": model, "tokenizer": tok, "encoder": enc, "config": cfg}


def _main_hydra() -> None:
    import hydra
    from omegaconf import OmegaConf

    conf_dir = str(Path(__file__).resolve().parents[2] / "conf" / "train")

    @hydra.main(version_base="1.3", config_path=conf_dir, config_name="compose")
    def _run(cfg) -> None:
        d = OmegaConf.to_container(cfg, resolve=True)
        d.pop("hydra", None)
        run_training(d, log=lambda s: print(s, flush=True))

    _run()


if __name__ == "__main__":
    _main_hydra()
