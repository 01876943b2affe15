"""MATH-500 (``HuggingFaceH4/MATH-500``, split ``test``), zero-shot in the DeepSeek-R1 format.

Format followed: DeepSeek-R1's math prompt, one user turn
``<problem>\\nPlease reason step by step, and put your final answer within \\boxed{}.``, no system
prompt, rendered with the tokenizer's chat template; without one (or ``use_chat=false``) the same text
is followed by a newline.  Graded with math-verify: ``verify(parse("$" + answer + "$"), parse(completion))``
(gold first; the bare gold answer is wrapped in ``$...$`` so that math-verify's LaTeX extractor reads it).
"""

from __future__ import annotations

from typing import Any

from recdiff.benchmarks import Benchmark, Problem, Score, apply_chat, has_chat_template
from recdiff.benchmarks.data import load_rows

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
STOP_STRINGS = ["</s>", "<|im_end|>", "<|end_turn|>"]


def user_turn(problem: str) -> str:
    return f"{problem}\n{INSTRUCTION}"


class MATH500(Benchmark):
    """Local files need ``problem`` and ``answer`` (``unique_id``, ``subject``, ``level`` are kept if present)."""

    name = "math500"
    dataset_id = "HuggingFaceH4/MATH-500"
    stop_strings = STOP_STRINGS

    def __init__(self, *, split: str = "test", **options: Any):
        super().__init__(**options)
        self.split = split

    def _rows(self) -> tuple[list[dict], str]:
        return load_rows(self.name, self.path, self.dataset_id, None, self.split, ("problem", "answer"))

    def _problem(self, row: dict, index: int) -> Problem:
        meta = {k: row[k] for k in ("subject", "level", "solution") if k in row}
        return Problem(id=str(row.get("unique_id") or f"{self.name}/{self.split}/{index}"),
                       question=row["problem"], reference=str(row["answer"]), meta=meta)

    def render(self, problem: Problem, tokenizer: Any = None) -> str:
        if self.use_chat and has_chat_template(tokenizer):
            return apply_chat(tokenizer, [{"role": "user", "content": user_turn(problem.question)}])
        return user_turn(problem.question) + "\n"

    def score_all(self, problems: list[Problem], completions: list[str]) -> list[Score]:
        from recdiff.benchmarks.mathgrade import grade

        self._check_lengths(problems, completions)
        return grade([p.reference for p in problems], completions, self.workers)
