"""Training recipe of the embedded recurrent-depth model (``python -m recdiff.train``).

Huginn's recipe at toy scale:
- the same architecture (:class:`recdiff.model.RecurrentDepthModel`: prelude / core / coda, input injection
  through the adapter, sandwich norms, takase init);
- randomized unrolling: per step the number of recurrences is ``p = Poisson(LogNormal(mu, 0.5)) + 1`` with
  ``mu = log(mean_recurrence) - 0.5**2/2``; the first ``max(p - k, 0)`` recurrences run without gradient,
  the last ``min(k, p)`` with gradient (truncated backpropagation, ``k = mean_backprop_depth``);
- random initial states (``init_scale`` α = 1);
- AdamW, trapezoid learning rate (linear warm-up, constant, linear cool-down), gradient clipping.
Data: an endless stream of ``arith`` train-split problems with solutions written ``data.steps_per_line``
sentences per line (0: the whole chain in one line, so each result needs 2-4 chained operations of latent
work; the test split is disjoint by construction), loss on the completion tokens only (solution + EOS).  The
tokenizer (byte-level BPE, single-digit tokens) is trained on the first ``tokenizer_corpus`` train problems.
Checkpoints are written atomically every ``checkpoint_every_s`` seconds in the official layout (``config.json``,
``model.safetensors``, ``tokenizer.json``).

The schedule's progress is ``max(step / max_steps, elapsed / time_budget_s)``: a run under a wall-clock
budget still cools down before its deadline (the step count reached is logged and written to the run's
``train_state.json``).

Curriculum: ``data.curriculum_frac`` > 0 writes early problems ``data.curriculum_start`` sentences per line, with
the final layout's share rising linearly to 1 over that fraction of the run; ``init_from`` continues from a
checkpoint folder (weights, config and tokenizer; the schedule restarts), i.e. a later stage of a multi-stage run.

Hydra config: ``conf/train/embedded.yaml`` (``--config-name`` picks another file in ``conf/train/``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from recdiff.benchmarks import arith
from recdiff.config import RecurrentConfig
from recdiff.model import RecurrentDepthModel

DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "data_seed": 0,
    "threads": "auto",
    "device": "cpu",
    "out_dir": "outputs/train/embedded",
    "init_from": None,
    "model": {
        "n_embd": 128, "n_heads": 4, "num_key_value_heads": 4,
        "n_layers_in_prelude": 1, "n_layers_in_recurrent_block": 2, "n_layers_in_coda": 1,
        "intermediate_size": 352, "block_size": 256, "mean_recurrence": 16, "mean_backprop_depth": 4,
        "rope_base": 50000.0, "qk_bias": True, "bias": False, "tie_embeddings": True,
    },
    "data": {"steps_per_line": arith.STEPS_PER_LINE, "curriculum_start": 1, "curriculum_frac": 0.0},
    "tokenizer": {"vocab_size": 512, "corpus": 20000},
    "train": {
        "batch_size": 24, "lr": 3e-3, "min_lr_frac": 0.0, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95,
        "grad_clip": 1.0, "warmup_steps": 50, "cooldown_frac": 0.25, "max_steps": 100000,
        "time_budget_s": 3600.0, "init_scale": 1.0, "lognormal_sigma": 0.5, "log_every": 25,
        "checkpoint_every_s": 300.0, "eval_every_s": 900.0, "eval_n": 128, "eval_r": [1, 4, 8, 16, 32],
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
def sample_recurrence(mean_recurrence: int, backprop_depth: int, gen: torch.Generator, sigma: float = 0.5) -> tuple[int, int]:
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


# ------------------------------------------------------------------------------------------------ data
class Curriculum:
    """Solution layout per training problem: during the first ``frac`` of the run the share of problems written
    in the final layout (``steps_per_line``) rises linearly from 0 to 1, the others are written ``start``
    steps per line (one operation per written result: easy to learn, then composed into longer chains)."""

    def __init__(self, steps_per_line: int, start: int, frac: float, seed: int) -> None:
        self.final, self.start, self.frac = steps_per_line, start, frac
        self.rng = random.Random(f"curriculum/{seed}")

    def __call__(self, problem: arith.ArithProblem, progress: float) -> arith.ArithProblem:
        share = 1.0 if self.frac <= 0 else min(progress / self.frac, 1.0)
        spl = self.final if self.rng.random() < share else self.start
        if spl == self.final:
            return problem  # the stream already writes the final layout
        return dataclasses.replace(problem, solution=arith.write_solution(problem.steps, spl))


class Encoder:
    """prompt / completion → ids and completion mask, exactly as evaluation sees them."""

    def __init__(self, tok) -> None:  # a ``tokenizers.Tokenizer``
        self.tok = tok
        self.eos = tok.token_to_id("<|end_of_text|>")
        self.pad = tok.token_to_id("<|pad|>")

    def encode(self, problem: arith.ArithProblem) -> tuple[list[int], int]:
        p = self.tok.encode(arith.prompt_text(problem.question)).ids
        c = self.tok.encode(arith.completion_text(problem.solution)).ids + [self.eos]
        return p + c, len(p)

    def batch(self, problems) -> tuple[torch.Tensor, torch.Tensor]:
        rows = [self.encode(p) for p in problems]
        T = max(len(r) for r, _ in rows)
        ids = torch.full((len(rows), T), self.pad, dtype=torch.long)
        mask = torch.zeros((len(rows), T), dtype=torch.bool)  # mask[b, t]: target ids[b, t] is a completion token
        for b, (r, n_prompt) in enumerate(rows):
            ids[b, : len(r)] = torch.tensor(r)
            mask[b, n_prompt : len(r)] = True
        return ids, mask


def completion_loss(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean CE of predicting ids[:, t] from position t-1, over completion tokens."""
    lg = logits[:, :-1].reshape(-1, logits.shape[-1])
    tgt = ids[:, 1:].reshape(-1)
    m = mask[:, 1:].reshape(-1)
    return F.cross_entropy(lg[m], tgt[m])


@torch.no_grad()
def teacher_forced_accuracy(model, enc: Encoder, problems, r: int, seed: int = 0, batch_size: int = 64) -> dict:
    """Exact-match of the whole completion under teacher forcing at r recurrences (greedy decode reproduces the
    reference solution iff every argmax matches) and the mean per-token accuracy."""
    model.eval()
    exact, tok_ok, tok_n, loss_sum = 0, 0, 0, 0.0
    gen = torch.Generator().manual_seed(seed)
    for i in range(0, len(problems), batch_size):
        ids, mask = enc.batch(problems[i : i + batch_size])
        ids, mask = ids.to(model.freqs_cis.device), mask.to(model.freqs_cis.device)
        logits, _ = model.forward(ids, r=r, init_scale=1.0, generator=gen)
        pred = logits[:, :-1].argmax(-1)
        m = mask[:, 1:]
        ok = (pred == ids[:, 1:]) | ~m
        exact += int(ok.all(dim=1).sum())
        tok_ok += int(((pred == ids[:, 1:]) & m).sum())
        tok_n += int(m.sum())
        loss_sum += float(completion_loss(logits, ids, mask)) * len(problems[i : i + batch_size])
    model.train()
    return {"exact": exact / len(problems), "token_acc": tok_ok / tok_n, "loss": loss_sum / len(problems)}


# ------------------------------------------------------------------------------------------------ checkpoint
def save_checkpoint(model: RecurrentDepthModel, tok, folder: str | Path, extra: dict | None = None) -> None:
    """Atomic: write a sibling temp folder, then swap it in."""
    from recdiff.tokenizer import save_tokenizer

    folder = Path(folder)
    tmp = folder.with_name(folder.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        from recdiff.load import save_pretrained  # the lead's writer (official names)
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
    (folder / "config.json").write_text(json.dumps(model.config.to_dict(), indent=2) + "\n")


# ------------------------------------------------------------------------------------------------ main loop
def build_tokenizer_for(cfg: dict):
    from recdiff.tokenizer import build_tokenizer

    corpus = arith.generate_split("train", int(cfg["tokenizer"]["corpus"]), seed=int(cfg["data_seed"]),
                                  steps_per_line=int(cfg["data"]["steps_per_line"]))
    texts = [arith.prompt_text(p.question) + arith.completion_text(p.solution) for p in corpus]
    return build_tokenizer(texts, vocab_size=int(cfg["tokenizer"]["vocab_size"]))


def build_model(cfg: dict, vocab_size: int) -> RecurrentDepthModel:
    m = dict(cfg["model"])
    padded = int(math.ceil(vocab_size / 64) * 64)
    config = RecurrentConfig.from_dict({**m, "vocab_size": padded, "padded_vocab_size": padded})
    model = RecurrentDepthModel(config)
    model.init_weights(int(cfg["seed"]))
    return model


def run_training(overrides: dict | None = None, log=print) -> dict:
    cfg = _merge(DEFAULTS, overrides or {})
    tc = cfg["train"]
    threads = ThreadTuner(cfg["threads"])
    torch.manual_seed(int(cfg["seed"]))
    out_dir = Path(cfg["out_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)

    if cfg.get("init_from"):  # continue from a checkpoint (a curriculum stage): its weights, config, tokenizer
        from recdiff.load import load_model

        model = load_model(cfg["init_from"]).requires_grad_(True)
        tok = model.tokenizer.backend_tokenizer
        c = model.config
        cfg["model"] = {**cfg["model"], "mean_recurrence": c.mean_recurrence, "mean_backprop_depth": c.mean_backprop_depth}
    else:
        tok = build_tokenizer_for(cfg)
        model = build_model(cfg, tok.get_vocab_size())
    enc = Encoder(tok)
    dev = str(cfg.get("device", "cpu"))
    if dev == "auto":
        dev = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(dev)
    model.to(device)
    model.freqs_cis = model.freqs_cis.to(device)
    model.train()
    log(f"model: {model.num_parameters():,} parameters, vocab {tok.get_vocab_size()}, config {cfg['model']}")

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "wte" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "wte" not in n)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": float(tc["weight_decay"])}, {"params": no_decay, "weight_decay": 0.0}],
        lr=float(tc["lr"]), betas=(float(tc["beta1"]), float(tc["beta2"])),
    )
    gen = torch.Generator().manual_seed(int(cfg["seed"]) + 1)
    spl = int(cfg["data"]["steps_per_line"])
    curriculum = Curriculum(spl, int(cfg["data"]["curriculum_start"]), float(cfg["data"]["curriculum_frac"]),
                            int(cfg["data_seed"]))
    stream = arith.iter_split("train", int(cfg["data_seed"]), spl)
    eval_problems = arith.generate_split("test", int(tc["eval_n"]), seed=arith.DEFAULT_SEED, steps_per_line=spl)

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
        f = lr_factor(progress, step, int(tc["warmup_steps"]), float(tc["cooldown_frac"]), float(tc["min_lr_frac"]))
        for g in opt.param_groups:
            g["lr"] = float(tc["lr"]) * f
        threads.before(step)
        t_step = time.perf_counter()
        ids, mask = enc.batch([curriculum(next(stream), progress) for _ in range(int(tc["batch_size"]))])
        ids, mask = ids.to(device), mask.to(device)
        r_ng, r_g = sample_recurrence(mean_r, k, gen, float(tc["lognormal_sigma"]))
        logits = model.forward_train(ids, r_ng, r_g, init_scale=float(tc["init_scale"]))
        loss = completion_loss(logits, ids, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), float(tc["grad_clip"]))
        opt.step()
        threads.after(step, time.perf_counter() - t_step)
        step += 1
        lv = loss.item()
        ema = lv if ema is None else 0.98 * ema + 0.02 * lv
        history.append({"step": step, "loss": lv, "r": r_ng + r_g})
        state = {"step": step, "elapsed_s": round(time.time() - t0, 1), "loss_ema": ema, "lr": opt.param_groups[0]["lr"],
                 "seed": cfg["seed"], "data_seed": cfg["data_seed"], "config": cfg}
        if step % int(tc["log_every"]) == 0:
            log(f"step {step} t={time.time() - t0:.0f}s loss {lv:.4f} ema {ema:.4f} r={r_ng + r_g} "
                f"lr {opt.param_groups[0]['lr']:.2e} gnorm {float(gn):.2f} {step / (time.time() - t0):.2f} it/s "
                f"threads {torch.get_num_threads()}")
        now = time.time()
        if float(tc["eval_every_s"]) > 0 and now - last_eval >= float(tc["eval_every_s"]):
            res = {r: teacher_forced_accuracy(model, enc, eval_problems, r) for r in tc["eval_r"]}
            log("eval " + " ".join(f"r={r}: exact {v['exact']:.3f} tok {v['token_acc']:.3f} loss {v['loss']:.3f}" for r, v in res.items()))
            last_eval = time.time()
        if float(tc["checkpoint_every_s"]) > 0 and now - last_ckpt >= float(tc["checkpoint_every_s"]):
            save_checkpoint(model, tok, out_dir / "latest", extra=state)
            last_ckpt = time.time()
            log(f"checkpoint step {step} -> {out_dir / 'latest'}")
    save_checkpoint(model, tok, out_dir / "final", extra=state)
    save_checkpoint(model, tok, out_dir / "latest", extra=state)
    log(f"done: {step} steps in {time.time() - t0:.0f}s -> {out_dir / 'final'}")
    return {"history": history, "steps": step, "model": model, "tokenizer": tok, "encoder": enc, "config": cfg}


def _main_hydra() -> None:
    import hydra
    from omegaconf import OmegaConf

    conf_dir = str(Path(__file__).resolve().parent.parent / "conf" / "train")

    @hydra.main(version_base="1.3", config_path=conf_dir, config_name="embedded")
    def _run(cfg) -> None:
        d = OmegaConf.to_container(cfg, resolve=True)
        d.pop("hydra", None)
        run_training(d, log=lambda s: print(s, flush=True))

    _run()


if __name__ == "__main__":
    _main_hydra()
