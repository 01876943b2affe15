"""One trial: a composed config → measurements (knows nothing of Optuna).

:class:`Workload` holds what stays fixed over the trials of a job — the benchmark slice and the model
(loaded once per process and cached across the jobs of a multirun). :func:`run_trial` runs the sampler
over the slice: an untimed warm-up, then one device-synchronised timing per sample; it returns accuracy
with its 95% Wilson interval, the median tokens/s per sample (the paper's "t/s"), mean core passes per
token, peak memory, and writes the per-sample table (``samples.parquet`` + ``samples.csv``) and a few
diffusion traces (``traces/*.npz``) into the trial's output directory.

Failures are exceptions for the caller to record: :class:`~recdiff.errors.RecdiffError` = an invalid
combination of settings, :class:`TrialTimeout`, ``torch.OutOfMemoryError``/``MemoryError``, anything else.
Errors in the setup (:meth:`Workload.from_config`: unknown benchmark, missing model) are the user's to fix
and are raised as ``RecdiffError`` before any trial starts.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from omegaconf import DictConfig, OmegaConf

from recdiff.errors import RecdiffError
from recdiff.timing import PeakMemory, Timer, median_tokens_per_s

# (resolved path, device, dtype) → model; one load per process, reused by every job it runs.
_MODELS: dict[tuple[str, str, str | None], Any] = {}

SAMPLE_COLUMNS = ["problem_id", "prompt", "output", "extracted", "reference", "correct", "new_tokens",
                  "time_s", "tokens_per_s", "core_passes", "steps"]


class TrialTimeout(Exception):
    """The trial ran longer than ``run.timeout_s``."""


@dataclass
class TrialResult:
    accuracy: float
    tokens_per_s: float
    attrs: dict[str, Any]                 # user attributes (docs/architecture.md, "Studies")
    rows: list[dict[str, Any]] = field(default_factory=list)
    stability_png: str | None = None      # the first trace drawn, for the dashboard


# ------------------------------------------------------------------------------------------ config helpers


def sampler_params(sampler_cfg: DictConfig | dict) -> dict[str, Any]:
    """The keyword arguments for ``recdiff.generate``: the sampler keys without ``name`` and unset values."""
    d = sampler_cfg if isinstance(sampler_cfg, dict) else OmegaConf.to_container(sampler_cfg, resolve=True,
                                                                                  enum_to_str=True)
    return {k: v for k, v in d.items() if k != "name" and v is not None}


def check_combination(sampler: str, params: dict[str, Any]) -> str | None:
    """Why this combination of sampler settings cannot run (None when it can): the sampler's own rules, the same
    that ``recdiff.generate`` applies, checked without a model."""
    from recdiff.samplers import check_params

    try:
        check_params(sampler, params)
    except RecdiffError as err:
        return str(err)
    return None


def resolve_model_path(path: str) -> str:
    """Local folder (``recdiff/...`` = inside the installed package) or a Hugging Face hub id."""
    p = Path(os.path.expanduser(path))
    if p.exists():
        return str(p.resolve())
    if path.startswith("recdiff/"):
        import recdiff

        packaged = Path(recdiff.__file__).resolve().parent / path[len("recdiff/"):]
        if packaged.exists():
            return str(packaged)
        raise RecdiffError(f"model path not found: {path} (looked in {packaged})")
    looks_local = p.is_absolute() or path.startswith((".", "~")) or path.count("/") != 1
    if looks_local:
        raise RecdiffError(f"model path not found: {path}")
    return path  # "org/name": a hub id, resolved by recdiff.load_model


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RecdiffError(f"model.device={device} but no CUDA device is available (use model.device=cpu)")
    return device


def load_model_cached(path: str, device: str, dtype: str | None, compile: bool = False) -> Any:
    key = (path, device, dtype)
    if key not in _MODELS:
        import recdiff

        _MODELS[key] = recdiff.load_model(path, device=device, dtype=dtype)
    from recdiff.engine.runner import set_compile

    set_compile(_MODELS[key], compile)  # one model per process; compiled graphs are kept on it across trials
    return _MODELS[key]


class ByteCodec:
    """Prompt encoding for checkpoints without a tokenizer, opted into with ``model.tokenizer=bytes`` (the test
    fixture; see :func:`check_tokenizer`): UTF-8 bytes as token ids."""

    eos_token_id = None

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """Token ids of a prompt: the tokenizer's special tokens (BOS) unless the text starts with BOS already (a chat
    template wrote it); UTF-8 bytes with :class:`ByteCodec`."""
    if isinstance(tokenizer, ByteCodec):
        return tokenizer.encode(text)
    bos = getattr(tokenizer, "bos_token", None)
    # a chat template already wrote the BOS token; do not add a second one
    special = not (bos and text.startswith(bos))
    return list(tokenizer.encode(text, add_special_tokens=special))


def _cut_at_stop(text: str, stops: list[str]) -> str:
    cut = min((text.find(s) for s in stops if s and s in text), default=-1)
    return text if cut < 0 else text[:cut]


# ---------------------------------------------------------------------------------------------- workload


@dataclass
class Workload:
    model: Any
    device: str
    benchmark: Any
    problems: list[Any]

    @classmethod
    def from_config(cls, cfg: DictConfig,
                    before_load: Callable[[Path, str, Any], None] | None = None) -> "Workload":
        """Benchmark slice first (cheap, validates options), then the checkpoint folder and its tokenizer, then
        ``before_load(folder, dtype, benchmark)`` (the sweep opens and checks its study there), then the model (cached per
        process)."""
        from recdiff.benchmarks import get_benchmark
        from recdiff.load import resolve_dtype

        options = OmegaConf.to_container(cfg.benchmark, resolve=True)
        name = options.pop("name")
        for key in ("limit", "offset", "seed", "n_shot"):
            v = options.get(key)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                raise RecdiffError(f"benchmark.{key}={v!r} must be an integer")
        bench = get_benchmark(name, **options)
        problems = list(bench.problems())
        if not problems:
            raise RecdiffError(f"benchmark {name} has no problems in this slice (benchmark.limit/offset)")
        folder = checkpoint_folder(resolve_model_path(str(cfg.model.path)))
        check_tokenizer(folder, str(getattr(cfg.model.tokenizer, "value", cfg.model.tokenizer)), name)
        bench.check_model(folder)
        device = resolve_device(str(cfg.model.device))
        dtype = str(resolve_dtype(cfg.model.dtype, torch.device(device))).removeprefix("torch.")
        if before_load is not None:
            before_load(folder, dtype, bench)
        if cfg.run.threads:
            torch.set_num_threads(int(cfg.run.threads))
        model = load_model_cached(str(folder), device, cfg.model.dtype, bool(cfg.model.get("compile", False)))
        return cls(model=model, device=device, benchmark=bench, problems=problems)


def checkpoint_folder(path: str) -> Path:
    """The local folder of a checkpoint: the folder itself, or a hub id's snapshot (downloaded on first use)."""
    from recdiff.load import resolve_checkpoint

    return Path(path) if Path(path).is_dir() else resolve_checkpoint(path)


def check_tokenizer(folder: Path, tokenizer: str, benchmark: str) -> None:
    """Text benchmarks need the checkpoint's tokenizer; byte-level prompts only when asked (``model.tokenizer=bytes``,
    the test fixture), never as a silent fallback that would score garbage as a COMPLETE trial."""
    has = (folder / "tokenizer.json").is_file()
    if tokenizer == "checkpoint" and not has:
        raise RecdiffError(f"{folder / 'tokenizer.json'} not found: benchmark {benchmark} needs the checkpoint's "
                           "tokenizer (model.tokenizer=bytes feeds UTF-8 bytes as token ids, for test checkpoints)")
    if tokenizer == "bytes" and has:
        raise RecdiffError(f"model.tokenizer=bytes, but the checkpoint has {folder / 'tokenizer.json'}: "
                           "use model.tokenizer=checkpoint")


# ------------------------------------------------------------------------------------------------ timeout


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[Callable[[], None]]:
    """Raise :class:`TrialTimeout` after ``seconds``: by SIGALRM in the main thread (interrupts a long
    generate call), and by the returned ``check()`` between samples everywhere."""
    if not seconds:
        yield lambda: None
        return
    end = time.monotonic() + seconds

    def check() -> None:
        if time.monotonic() > end:
            raise TrialTimeout(f"timeout: trial ran longer than {seconds:g} s")

    use_alarm = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    if use_alarm:
        def on_alarm(signum: int, frame: Any) -> None:
            raise TrialTimeout(f"timeout: trial ran longer than {seconds:g} s")

        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield check
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def _inject(fault: str | None) -> None:
    if fault is None:
        return
    if fault == "error":
        raise RuntimeError("injected error (run.inject_fault=error)")
    if fault == "oom":
        raise torch.OutOfMemoryError("injected out-of-memory (run.inject_fault=oom)")
    if fault == "invalid":
        raise RecdiffError("injected invalid combination (run.inject_fault=invalid)")
    if fault == "hang":
        while True:
            time.sleep(0.05)
    if fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)


# -------------------------------------------------------------------------------------------------- trial


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name))[:80]


def run_trial(work: Workload, cfg: DictConfig, output_dir: str | os.PathLike) -> TrialResult:
    """Run ``cfg.sampler`` over the workload's problems; write samples and traces under ``output_dir``."""
    import recdiff
    from recdiff.benchmarks.stats import wilson_interval

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = str(cfg.sampler.name)
    params = sampler_params(cfg.sampler)
    reason = check_combination(name, params)
    if reason:
        raise RecdiffError(reason)

    tok = work.model.tokenizer
    codec = tok if tok is not None else ByteCodec()
    stops = list(work.benchmark.stop_strings or [])
    eos = getattr(codec, "eos_token_id", None)
    gen_kwargs = dict(
        sampler=name, max_new_tokens=int(cfg.run.max_new_tokens), seed=int(cfg.run.seed),
        temperature=float(cfg.run.temperature), top_p=float(cfg.run.top_p),
        stop_token_ids=[eos] if eos is not None else None,
        stop_strings=stops if tok is not None else None,   # the fixture has no tokenizer: cut below
        **params,
    )
    prompts = [work.benchmark.render(p, tok) for p in work.problems]
    prompt_ids = [encode_prompt(codec, t) for t in prompts]
    # a model's context bounds the answer: run.max_new_tokens is an upper limit, not a demand
    limits = []
    for problem, ids in zip(work.problems, prompt_ids):
        room = int(work.model.config.block_size) - len(ids) - 1
        if room < 1:
            raise RecdiffError(f"problem {problem.id}: prompt of {len(ids)} tokens does not fit the model's "
                               f"block_size {work.model.config.block_size}")
        limits.append(min(room, gen_kwargs["max_new_tokens"], work.benchmark.max_new_tokens(problem) or room))
    n_traces = int(cfg.run.n_traces) if name == "diffusion" else 0
    batch_size = int(cfg.run.batch_size or recdiff.default_batch_size(work.model.device))
    n_speed = min(int(cfg.run.speed_samples), len(prompt_ids))
    fault = cfg.run.inject_fault
    fault = getattr(fault, "value", fault)

    from tqdm.auto import tqdm

    label = f"{name} " + " ".join(f"{k}={v}" for k, v in params.items() if k in ("r", "r_inner", "beta", "epsilon"))
    bar = tqdm(total=len(prompt_ids) + n_speed, desc=label, file=sys.stderr, disable=not cfg.run.progress,
               leave=False, dynamic_ncols=True)
    with deadline(cfg.run.timeout_s) as check_time, PeakMemory(work.device) as mem, bar:
        _inject(fault)

        def tick(n: int) -> None:
            bar.update(n)
            check_time()

        # untimed warm-ups (allocations, compilation, graph capture) before each timed pass, with an answer that
        # fits every prompt of the pass
        def warm(lims: list[int]) -> dict[str, Any]:
            return {**gen_kwargs, "max_new_tokens": min([8, *lims])}

        # accuracy: every problem, `batch_size` sequences side by side (continuous batching)
        for _ in range(int(cfg.run.warmup)):
            recdiff.warm_up(work.model, prompt_ids, batch_size=batch_size, **warm(limits))
        with Timer(work.device) as batch_time:
            results = recdiff.generate(work.model, prompt_ids, **{**gen_kwargs, "max_new_tokens": limits},
                                       trace=[i < n_traces for i in range(len(prompt_ids))], batch_size=batch_size,
                                       progress=tick)
        # speed: the paper's metric, each of the first `speed_samples` problems alone (batch 1), timed
        for _ in range(int(cfg.run.warmup) if n_speed else 0):
            recdiff.warm_up(work.model, prompt_ids[:n_speed], batch_size=1, **warm(limits[:n_speed]))
        times: list[float] = []
        speed_tokens: list[int] = []
        for ids, lim in zip(prompt_ids[:n_speed], limits):
            with Timer(work.device) as t:
                alone = recdiff.generate(work.model, ids, **{**gen_kwargs, "max_new_tokens": lim})
            times.append(t.seconds)
            speed_tokens.append(int(alone.stats.get("new_tokens", len(alone.tokens))))
            tick(1)

    rows: list[dict[str, Any]] = []
    completions: list[str] = []
    stats: list[dict[str, Any]] = []
    trace_paths: list[str] = []
    for i, (problem, text, res) in enumerate(zip(work.problems, prompts, results)):
        completion = codec.decode(list(res.tokens))
        if tok is None:  # byte-level prompts have no stop strings in generate: cut here
            completion = _cut_at_stop(completion, stops)
        completions.append(completion)
        stats.append(dict(res.stats))
        n_new = int(res.stats.get("new_tokens", len(res.tokens)))
        timed = i < n_speed
        rows.append(dict(problem_id=str(problem.id), prompt=text, output=completion, reference=str(problem.reference),
                         new_tokens=n_new, time_s=times[i] if timed else None,
                         tokens_per_s=speed_tokens[i] / times[i] if timed and times[i] > 0 else None,
                         core_passes=int(res.stats.get("core_passes", 0)), steps=int(res.stats.get("steps", 0))))
        if getattr(res, "trace", None) is not None:
            path = out / "traces" / f"{i:03d}_{_safe(problem.id)}.npz"
            path.parent.mkdir(parents=True, exist_ok=True)
            res.trace.save(str(path), decode=lambda i: codec.decode([i]))
            trace_paths.append(str(path))

    scores = work.benchmark.score_all(work.problems, completions)
    for row, score in zip(rows, scores):
        row["correct"] = bool(score.correct)
        row["extracted"] = score.extracted
    k, n = sum(r["correct"] for r in rows), len(rows)
    low, high = wilson_interval(k, n)
    total_tokens = sum(r["new_tokens"] for r in rows)
    kv = [s["kv_cache_bytes"] for s in stats if s.get("kv_cache_bytes") is not None]
    if not kv and callable(getattr(work.model, "kv_cache_bytes", None)):
        kv = [work.model.kv_cache_bytes()]

    samples_path = _write_samples(rows, out)
    stability_png = None
    if trace_paths:
        from recdiff.artifacts import plot_stability

        stability_png = plot_stability(trace_paths[0], out / "stability.png", tokenizer=tok)

    attrs = dict(
        accuracy_low=float(low), accuracy_high=float(high), n_samples=n, n_correct=k,
        # generated tokens per wall-clock second over the whole slice at batch_size: a throughput, not tokens_per_s
        throughput_tokens_per_s=total_tokens / batch_time.seconds if batch_time.seconds > 0 else 0.0,
        batch_size=batch_size, speed_samples=n_speed, compiled=bool(work.model.engine_options.get("compile")),
        core_passes_per_token=sum(r["core_passes"] for r in rows) / total_tokens if total_tokens else 0.0,
        peak_memory_bytes=int(mem.bytes), kv_cache_bytes=int(max(kv)) if kv else None,
        mean_new_tokens=total_tokens / n if n else 0.0,
        time_per_sample_s=sum(times) / n_speed if n_speed else 0.0,
        samples_path=str(samples_path), trace_paths=trace_paths, output_dir=str(out),
    )
    return TrialResult(accuracy=float(work.benchmark.accuracy(scores)),
                       tokens_per_s=median_tokens_per_s(speed_tokens, times),
                       attrs=attrs, rows=rows, stability_png=str(stability_png) if stability_png else None)


def _write_samples(rows: list[dict[str, Any]], out: Path) -> Path:
    import polars as pl

    df = pl.DataFrame([{c: r.get(c) for c in SAMPLE_COLUMNS} for r in rows],
                      schema={"problem_id": pl.Utf8, "prompt": pl.Utf8, "output": pl.Utf8, "extracted": pl.Utf8,
                              "reference": pl.Utf8, "correct": pl.Boolean, "new_tokens": pl.Int64,
                              "time_s": pl.Float64, "tokens_per_s": pl.Float64, "core_passes": pl.Int64,
                              "steps": pl.Int64})
    path = out / "samples.parquet"
    df.write_parquet(path)
    df.write_csv(out / "samples.csv")   # the dashboard shows .csv artifacts as a table
    return path
