"""Benchmarks, the evaluation tasks a trial measures accuracy on: loading, prompting and scoring (see ``README.md`` in
this folder). The name is the concept's everywhere (the Hydra group ``conf/benchmark/``, the ``benchmark.*`` keys, the
study identity's ``benchmark`` part); the speed benches are :mod:`recdiff.tools.speed` (``python -m recdiff.bench``).

```python
bench = get_benchmark("gsm8k", limit=50, seed=0)
problems = bench.problems()                      # deterministic slice
text = bench.render(problems[0], tokenizer)      # final prompt text
scores = bench.score_all(problems, completions)  # list[Score]
```

Benchmark modules are imported lazily by :func:`get_benchmark` (``datasets``, ``math_verify`` and the
code executor are only imported by the benchmarks that need them).  Another module adds a benchmark with
one line, ``@register("name")`` on its class, or by adding ``"name": "module:Class"`` to ``_LAZY``.
"""

from __future__ import annotations

import hashlib
import importlib
import random
from dataclasses import dataclass, field
from typing import Any, Callable

from recdiff.errors import RecdiffError

__all__ = ["Problem", "Score", "Benchmark", "get_benchmark", "register", "available"]


@dataclass
class Problem:
    id: str
    question: str
    reference: str
    meta: dict = field(default_factory=dict)


@dataclass
class Score:
    correct: bool
    extracted: str | None
    detail: dict = field(default_factory=dict)


_REGISTRY: dict[str, type] = {}
# name -> "module:Class"; imported on first use so that `import recdiff.benchmarks` stays cheap.
_LAZY: dict[str, str] = {
    "gsm8k": "recdiff.benchmarks.gsm8k:GSM8K",
    "math500": "recdiff.benchmarks.math500:MATH500",
    "minerva_math": "recdiff.benchmarks.minerva_math:MinervaMath",
    "humaneval": "recdiff.benchmarks.humaneval:HumanEval",
    "mbpp": "recdiff.benchmarks.mbpp:MBPP",
    "arith": "recdiff.benchmarks.arith:ArithBenchmark",
    "compose": "recdiff.benchmarks.compose:ComposeBenchmark",
    "lm_eval": "recdiff.lm_eval.benchmark:LmEvalBenchmark",   # any lm-evaluation-harness task (extra "lm-eval")
}


def register(name: str) -> Callable[[type], type]:
    """Class decorator: ``@register("arith")`` makes ``get_benchmark("arith")`` return that class."""

    def deco(cls: type) -> type:
        _REGISTRY[name] = cls
        if getattr(cls, "name", None) in (None, "", Benchmark.name):
            cls.name = name
        return cls

    return deco


def available() -> list[str]:
    return sorted(set(_REGISTRY) | set(_LAZY))


def get_benchmark(name: str, **options: Any) -> "Benchmark":
    """Instantiate benchmark ``name`` with the keys of ``conf/benchmark/<name>.yaml`` as options."""
    options.pop("name", None)  # configs carry their own name
    if name not in _REGISTRY and name in _LAZY:
        module, cls_name = _LAZY[name].split(":")
        cls = getattr(importlib.import_module(module), cls_name)
        _REGISTRY.setdefault(name, cls)
    if name not in _REGISTRY:
        raise RecdiffError(f"unknown benchmark {name!r}; available: {', '.join(available())}")
    return _REGISTRY[name](**options)


def checkpoint_task(folder: Any) -> str:
    """The embedded benchmark a checkpoint folder was trained on: ``compose.json`` → ``compose``; else its
    ``train_state.json``'s ``data.task`` (``arith`` for runs from before that option); ``compose`` when unknown."""
    import json
    from pathlib import Path

    folder = Path(folder)
    if (folder / "compose.json").is_file():
        return "compose"
    state = folder / "train_state.json"
    if state.is_file():
        return str(json.loads(state.read_text()).get("config", {}).get("data", {}).get("task", "arith"))
    return "compose"


def select_indices(n: int, *, limit: int | None = None, offset: int = 0, subsample: int | None = None,
                   seed: int = 0) -> list[int]:
    """The slice used by every trial of a study: a seeded subsample (kept in dataset order), then
    ``offset``/``limit``.  Depends only on its arguments, so it is identical across trials."""
    idx = list(range(n))
    if subsample is not None and subsample < n:
        idx = sorted(random.Random(f"recdiff-subsample/{seed}").sample(idx, int(subsample)))
    idx = idx[int(offset):]
    return idx if limit is None else idx[: int(limit)]


class Benchmark:
    """Base class.  Subclasses set ``name``, ``stop_strings`` and implement ``_rows``, ``_problem``,
    ``render`` and ``score_all``; the slice logic and its record live here."""

    name: str = "benchmark"
    stop_strings: list[str] = []

    def __init__(self, *, path: str | None = None, limit: int | None = None, offset: int = 0,
                 seed: int = 0, subsample: int | None = None, use_chat: bool = True, workers: int = 2,
                 **options: Any):
        if options:
            raise RecdiffError(f"{self.name}: unknown option(s) {', '.join(sorted(options))}")
        for key, val in (("limit", limit), ("subsample", subsample)):
            if val is not None and int(val) < 0:
                raise RecdiffError(f"{self.name}: {key} must be >= 0, got {val}")
        if int(offset) < 0:
            raise RecdiffError(f"{self.name}: offset must be >= 0, got {offset}")
        self.path, self.limit, self.offset, self.seed = path, limit, int(offset), int(seed)
        self.subsample, self.use_chat, self.workers = subsample, bool(use_chat), max(1, int(workers))
        self.selection: dict[str, Any] = {}
        self._problems: list[Problem] | None = None

    # -- data -------------------------------------------------------------------------------------
    def _rows(self) -> tuple[list[dict], str]:
        """All rows of the evaluation split in canonical order, and a description of the source."""
        raise NotImplementedError

    def _problem(self, row: dict, index: int) -> Problem:
        raise NotImplementedError

    def problems(self) -> list[Problem]:
        if self._problems is None:
            rows, source = self._rows()
            idx = select_indices(len(rows), limit=self.limit, offset=self.offset,
                                 subsample=self.subsample, seed=self.seed)
            self._problems = [self._problem(rows[i], i) for i in idx]
            ids = [p.id for p in self._problems]
            # Recorded with every result so that a study can prove all trials saw the same problems.
            self.selection = {
                "benchmark": self.name, "source": source, "n_total": len(rows), "offset": self.offset,
                "limit": self.limit, "subsample": self.subsample, "seed": self.seed, "ids": ids,
                "ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest(),
            }
        return list(self._problems)

    def check_model(self, folder: Any) -> None:
        """Raise a one-line :class:`RecdiffError` when the checkpoint in ``folder`` cannot be scored on this
        benchmark (a task definition it carries disagrees with the benchmark's); most benchmarks accept any."""

    # -- prompting / scoring ----------------------------------------------------------------------
    def render(self, problem: Problem, tokenizer: Any = None) -> str:
        raise NotImplementedError

    def score_all(self, problems: list[Problem], completions: list[str]) -> list[Score]:
        raise NotImplementedError

    def accuracy(self, scores: list[Score]) -> float:
        """The trial's ``accuracy``: the share of correct answers (an lm-eval task: lm-eval's aggregate)."""
        return sum(s.correct for s in scores) / len(scores) if scores else 0.0

    def max_new_tokens(self, problem: Problem) -> int | None:
        """The benchmark's own cap on a problem's answer (an lm-eval task's ``max_gen_toks``); None: only
        ``run.max_new_tokens`` and the model's context bound it."""
        return None

    def identity(self) -> dict[str, Any]:
        """Facts the measurement depends on that the benchmark's options do not state (an lm-eval task's version);
        they join the options in the study's identity."""
        return {}

    def _check_lengths(self, problems: list, completions: list) -> None:
        if len(problems) != len(completions):
            raise RecdiffError(f"{self.name}: {len(problems)} problems but {len(completions)} completions")


def has_chat_template(tokenizer: Any) -> bool:
    return tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))


def apply_chat(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
