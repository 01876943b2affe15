"""lm-eval tasks by name, optionally on a local copy of their data, and lm-eval's own pipeline run around recdiff's
answers: :func:`run_task` hands lm-eval a stand-in model that records the requests lm-eval builds (the prompts) and
answers them with given completions (scored by lm-eval's filters, metrics and aggregation).

Every failure a user can cause (an unknown task, a group instead of a task, a dataset that cannot be loaded) is one
:class:`~recdiff.errors.RecdiffError` line.
"""

from __future__ import annotations

import difflib
import logging
import tempfile
from pathlib import Path
from typing import Any, Callable

import yaml
from lm_eval.api.instance import Instance
from lm_eval.api.model import LM
from lm_eval.api.task import Task
from lm_eval.tasks import TaskManager

from recdiff.errors import RecdiffError

_MANAGERS: dict[tuple[str, ...], TaskManager] = {}   # one per process; its index on disk (task_index.py)
DATA_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


def task_manager(include_path: str | None = None) -> TaskManager:
    """lm-eval's task index, with the YAML tasks under ``include_path`` (``lm_eval --include_path``)."""
    key = (str(Path(include_path).expanduser().resolve()),) if include_path else ()
    if key and not Path(key[0]).exists():
        raise RecdiffError(f"benchmark.include_path={include_path} does not exist")
    if key not in _MANAGERS:
        _MANAGERS[key] = TaskManager(include_path=key[0] if key else None)
    return _MANAGERS[key]


def load_task(name: str, include_path: str | None = None, path: str | None = None,
              output_type: str | None = None) -> Task:
    """The lm-eval task ``name``; with ``path``, its evaluation split read from that local file instead of its
    dataset (the task's YAML included, only the data source replaced). ``output_type``: the kind of task wanted,
    checked before its data loads."""
    tm = task_manager(include_path)
    entry = tm.task_index.get(name)
    if entry is None:
        close = difflib.get_close_matches(name, tm.all_subtasks, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else " (lm_eval ls tasks lists them)"
        raise RecdiffError(f"unknown lm-eval task {name!r}{hint}")
    if name not in tm.all_subtasks:
        raise RecdiffError(f"lm-eval {name!r} is a group or tag of several tasks; name one task")
    config = _config(entry.yaml_path)
    if output_type is not None and entry.yaml_path is not None:
        _check_output_type(name, config.get("output_type"), output_type)
    spec: Any = name
    with tempfile.TemporaryDirectory(prefix="recdiff-lm-eval-") as tmp:
        if path is not None:
            spec = _local_copy(name, entry.yaml_path, config, Path(path), Path(tmp))
        try:
            task = tm.load([spec])["tasks"][name]
        except RecdiffError:
            raise
        except Exception as exc:   # the dataset (hub download offline, a bad local file) or the task's own code
            if path is not None and isinstance(exc, KeyError):
                raise RecdiffError(f"lm-eval task {name!r} also needs its split {exc} (few-shot examples), which "
                                   "benchmark.path does not give: write a task YAML with every split "
                                   "(benchmark.include_path)") from None
            first = (str(exc).strip().splitlines() or [""])[0]
            hint = "" if path else "; offline, give a local copy with benchmark.path=FILE"
            raise RecdiffError(f"lm-eval task {name!r} could not be loaded: {type(exc).__name__}: {first}{hint}"
                               ) from None
    if output_type is not None:
        _check_output_type(name, task.OUTPUT_TYPE, output_type)
    return task


def _config(yaml_path: Path | None) -> dict[str, Any]:
    """A YAML task's merged config (its includes read), without importing its functions."""
    if yaml_path is None:
        return {}
    from lm_eval.tasks._yaml_loader import load_yaml

    return load_yaml(yaml_path, resolve_func=False)


def _check_output_type(name: str, found: str | None, wanted: str) -> None:
    if found != wanted:
        raise RecdiffError(f"lm-eval task {name!r} is {found}, not {wanted}: a sweep measures samplers, which only "
                           "generative tasks (generate_until) use; score it with python -m recdiff.lm_eval --model "
                           "recdiff")


def _local_copy(name: str, yaml_path: Path | None, cfg: dict[str, Any], data: Path, folder: Path) -> str:
    if yaml_path is None:
        raise RecdiffError(f"lm-eval task {name!r} is defined in Python, not YAML: benchmark.path cannot replace "
                           "its data (write a task YAML and pass benchmark.include_path)")
    data = data.expanduser().resolve()
    if not data.is_file():
        raise RecdiffError(f"benchmark.path={data} not found")
    if data.suffix not in DATA_FORMATS:
        raise RecdiffError(f"benchmark.path={data}: expected one of {', '.join(DATA_FORMATS)}")
    split = cfg.get("test_split") or cfg.get("validation_split") or "test"
    local = {"include": str(yaml_path), "task": name, "dataset_path": DATA_FORMATS[data.suffix], "dataset_name": None,
             "dataset_kwargs": {"data_files": {split: str(data)}}}
    out = folder / f"{name}.yaml"
    out.write_text(yaml.safe_dump(local))
    return str(out)


class StandIn(LM):
    """The model lm-eval hands its requests to: it keeps them and answers ``generate_until`` with
    ``answers[doc_id]`` ("" when none). ``chat`` renders a chat history (``--apply_chat_template``)."""

    def __init__(self, answers: dict[int, str] | None = None, chat: Callable[[list[dict]], str] | None = None,
                 chat_name: str = "") -> None:
        super().__init__()
        self.answers = answers or {}
        self.requests: list[Instance] = []
        self.chat, self.chat_name = chat, chat_name

    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        self.requests.extend(requests)
        return [self.answers.get(r.doc_id, "") for r in requests]

    def loglikelihood(self, requests: list[Instance], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        raise RecdiffError("this lm-eval task scores log-likelihoods, not generated answers: a sweep measures "
                           "samplers, which only generative tasks use (score it with python -m recdiff.lm_eval)")

    loglikelihood_rolling = loglikelihood   # type: ignore[assignment]

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        if self.chat is None:
            raise RecdiffError("a chat template was asked for, but the tokenizer has none")
        return self.chat(chat_history)

    @property
    def tokenizer_name(self) -> str:
        return self.chat_name


def run_task(task: Task, doc_ids: list[int], model: StandIn, n_shot: int | None = None, chat: bool = False,
             system_instruction: str | None = None, include_path: str | None = None) -> dict[str, Any]:
    """lm-eval's ``simple_evaluate`` of ``task`` on the documents ``doc_ids`` (sorted) with ``model``, as
    ``lm_eval --samples`` runs it (``chat``: ``--apply_chat_template --fewshot_as_multiturn``): its few-shot seed, no
    stderr bootstrap, every sample logged. Leaves the global random seeds alone."""
    from lm_eval.evaluator import simple_evaluate

    logging.getLogger("lm_eval").setLevel(logging.WARNING)   # its INFO lines per call would drown a sweep's
    return simple_evaluate(model=model, tasks=[task], num_fewshot=n_shot, samples={task.task_name: list(doc_ids)},
                           bootstrap_iters=0, log_samples=True, apply_chat_template=chat, fewshot_as_multiturn=chat,
                           system_instruction=system_instruction, task_manager=task_manager(include_path),
                           random_seed=None, numpy_random_seed=None, torch_random_seed=None)
