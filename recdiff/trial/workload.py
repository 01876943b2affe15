"""What stays fixed over the trials of a job: the benchmark slice and the model.

In two steps, so that a sweep can open its study between them: :func:`prepare` (the benchmark slice, the checkpoint
folder, its tokenizer and the device: every check that needs no model, each failure one :class:`RecdiffError` line)
and :meth:`Prepared.load` (the model, loaded once per process and reused by every job of a multirun).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from recdiff.errors import RecdiffError

if TYPE_CHECKING:
    from recdiff.schema import ModelConfig

# (resolved path, device, dtype, family) → model; one load per process, reused by every job it runs.
_MODELS: dict[tuple[str, str, str | None, str | None], Any] = {}


@dataclass
class Workload:
    model: Any
    device: str
    benchmark: Any
    problems: list[Any]
    threads: int | None = None   # torch CPU threads the job set (its thread budget)


@dataclass
class Prepared:
    """A workload before its model loads."""

    model_cfg: ModelConfig
    benchmark: Any
    problems: list[Any]
    folder: Path              # the checkpoint's local folder
    device: str
    dtype: str                # what the weights run in (``float32``, ``bfloat16`` ...)

    def load(self, threads: int | None = None) -> Workload:
        """The model (cached per process); ``threads`` sets torch's CPU threads first."""
        if threads:
            torch.set_num_threads(threads)
        m = self.model_cfg
        model = load_model_cached(str(self.folder), self.device, m.dtype, m.compile, m.family)
        return Workload(model=model, device=self.device, benchmark=self.benchmark, problems=self.problems,
                        threads=threads)


def prepare(model: ModelConfig, benchmark: dict[str, Any]) -> Prepared:
    """Benchmark slice first (cheap, validates options), then the checkpoint folder, its weight files' headers, the
    model family it fits (``model.family``, or recognised), its tokenizer, the benchmark's own check of the
    checkpoint, the device and the dtype."""
    from recdiff.benchmarks import get_benchmark
    from recdiff.checkpoint import check_weight_files, read_config, resolve_device, resolve_dtype, resolve_model_path

    options = dict(benchmark)
    name = options.pop("name")
    bench = get_benchmark(name, **options)
    problems = list(bench.problems())
    if not problems:
        raise RecdiffError(f"benchmark {name} has no problems in this slice (benchmark.limit/offset)")
    folder = checkpoint_folder(resolve_model_path(model.path))
    check_weight_files(folder)
    read_config(folder, model.family)
    check_tokenizer(folder, model.tokenizer.value, name)
    bench.check_model(folder)
    device = resolve_device(model.device)
    dtype = str(resolve_dtype(model.dtype, torch.device(device))).removeprefix("torch.")
    return Prepared(model, bench, problems, folder, device, dtype)


def load_model_cached(path: str, device: str, dtype: str | None, compile: bool = False,
                      family: str | None = None) -> Any:
    key = (path, device, dtype, family)
    if key not in _MODELS:
        import recdiff

        _MODELS[key] = recdiff.load_model(path, device=device, dtype=dtype, family=family)
    from recdiff.engine.runner import set_compile

    set_compile(_MODELS[key], compile)  # one model per process; compiled graphs are kept on it across trials
    return _MODELS[key]


def checkpoint_folder(path: str) -> Path:
    """The local folder of a checkpoint: the folder itself, or a hub id's snapshot (downloaded on first use)."""
    from recdiff.checkpoint import resolve_checkpoint

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
