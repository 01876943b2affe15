"""What a training step reads (``python -m recdiff.tools.train``): the task's problems as ids with a completion mask,
in endless batches that follow the schedule's progress and the adaptive curriculum's level.

``data.task`` names the task's training data, which lives next to its benchmark (a new task adds one module). A task
object gives ``tokenizer()``, ``texts(problem) -> (prompt, completion)``, ``stream(worker) -> draw(progress, level)``,
``eval_problems(n)``, ``difficulty(problem)`` and ``save(folder)`` (what a checkpoint must carry of the task);
``threshold`` > 0 with ``max_level`` turns on the adaptive curriculum (:class:`LevelCurriculum`).
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from recdiff.errors import RecdiffError

TASKS = {
    "compose": "recdiff.benchmarks.compose:TrainingData",
    "arith": "recdiff.benchmarks.arith:TrainingData",
}


def make_task(cfg: dict) -> Any:
    name = str(cfg["data"].get("task", "compose"))
    if name not in TASKS:
        raise RecdiffError(f"data.task={name!r}: choose one of {', '.join(TASKS)}")
    module, cls = TASKS[name].split(":")
    return getattr(importlib.import_module(module), cls)(cfg)


class Encoder:
    """problem → ids and completion mask, exactly as evaluation sees them (the task writes the texts)."""

    def __init__(self, tok, task: Any) -> None:  # a ``tokenizers.Tokenizer``
        self.tok, self.task = tok, task
        self.eos = tok.token_to_id("<|end_of_text|>")
        self.pad = tok.token_to_id("<|pad|>")

    def encode(self, problem: Any) -> tuple[list[int], int]:
        prompt, completion = self.task.texts(problem)
        p = self.tok.encode(prompt).ids
        c = self.tok.encode(completion).ids + [self.eos]
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


class LevelCurriculum:
    """The adaptive curriculum: ``level`` (shared with loader processes) goes up by one, to at most ``max_level``,
    once the running mean (EMA, ``decay``) of the training batches' exact match reaches ``threshold``; the mean
    restarts from 0 at each new level, so a level must be solved on its own batches."""

    def __init__(self, level: Any, threshold: float, max_level: int, decay: float = 0.95) -> None:
        self.level, self.threshold, self.max_level, self.decay = level, threshold, max_level, decay
        self.ema = 0.0

    def update(self, batch_exact: float) -> bool:
        """Record one batch; True when the level went up."""
        self.ema = self.decay * self.ema + (1 - self.decay) * batch_exact
        if self.ema >= self.threshold and self.level.value < self.max_level:
            self.level.value += 1
            self.ema = 0.0
            return True
        return False


class Batches(torch.utils.data.IterableDataset):
    """Endless (ids, mask) batches; the run's progress and curriculum level are read from shared values so that
    background loader processes follow the schedule."""

    def __init__(self, task: Any, enc: Encoder, batch_size: int, progress: Any, level: Any) -> None:
        self.task, self.enc, self.batch_size, self.progress, self.level = task, enc, batch_size, progress, level

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        draw = self.task.stream(0 if info is None else info.id + 1)
        while True:
            yield self.enc.batch([draw(self.progress.value, self.level.value) for _ in range(self.batch_size)])
