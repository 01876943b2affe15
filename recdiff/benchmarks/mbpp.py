"""MBPP (``google-research-datasets/mbpp``, config ``full``, split ``test``: 500 problems), 3-shot.

Format followed: lm-evaluation-harness ``mbpp``: each example is ``You are an expert Python programmer,
and here is your task: <text> Your code should pass these tests:\\n\\n<test 1>\\n<test 2>\\n<test 3>\\n[BEGIN]``
followed by ``\\n<code>\\n[DONE]``; examples joined by a blank line; the 3 exemplars are MBPP task ids
2, 3 and 4 (lm-eval's ``list_fewshot_samples``); generation stops at ``[DONE]``.  With a chat template the
examples are user / assistant turns (lm-eval ``--fewshot_as_multiturn``).  Scoring as lm-eval's
``pass_at_1``: the completion (up to ``[DONE]``; the first fenced code block if it has one) followed by
the problem's ``test_setup_code`` and ``test_list`` asserts, run through the executor.
"""

from __future__ import annotations

import re
from typing import Any

from recdiff.benchmarks import Problem, apply_chat, has_chat_template
from recdiff.benchmarks.data import load_rows
from recdiff.benchmarks.humaneval import CodeBenchmark
from recdiff.errors import RecdiffError

EXEMPLARS: list[dict] = [
    {"text": "Write a function to find the similar elements from the given two tuple lists.",
     "code": "def similar_elements(test_tup1, test_tup2):\r\n  res = tuple(set(test_tup1) & set(test_tup2))\r\n"
             "  return (res) ",
     "test_list": ["assert similar_elements((3, 4, 5, 6),(5, 7, 4, 10)) == (4, 5)",
                   "assert similar_elements((1, 2, 3, 4),(5, 4, 3, 7)) == (3, 4)",
                   "assert similar_elements((11, 12, 14, 13),(17, 15, 14, 13)) == (13, 14)"]},
    {"text": "Write a python function to identify non-prime numbers.",
     "code": "import math\r\ndef is_not_prime(n):\r\n    result = False\r\n"
             "    for i in range(2,int(math.sqrt(n)) + 1):\r\n"
             "        if n % i == 0:\r\n            result = True\r\n    return result",
     "test_list": ["assert is_not_prime(2) == False", "assert is_not_prime(10) == True",
                   "assert is_not_prime(35) == True"]},
    {"text": "Write a function to find the largest integers from a given list of numbers using heap queue algorithm.",
     "code": "import heapq as hq\r\ndef heap_queue_largest(nums,n):\r\n  largest_nums = hq.nlargest(n, nums)\r\n"
             "  return largest_nums",
     "test_list": ["assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],3)==[85, 75, 65] ",
                   "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],2)==[85, 75] ",
                   "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],5)==[85, 75, 65, 58, 35]"]},
]

STOP_STRINGS = ["[DONE]", "</s>", "<|im_end|>", "<|end_turn|>"]
_FENCE = re.compile(r"```(?:[A-Za-z0-9_+-]*)\n?(.*?)(?:```|$)", re.DOTALL)


def user_turn(text: str, tests: list[str]) -> str:
    return (f"You are an expert Python programmer, and here is your task: {text} Your code should pass these "
            "tests:\n\n" + "\n".join(tests) + "\n[BEGIN]")


def render_plain(text: str, tests: list[str], n_shot: int = 3) -> str:
    shots = "".join(f"{user_turn(e['text'], e['test_list'])}\n{e['code']}\n[DONE]\n\n" for e in EXEMPLARS[:n_shot])
    return shots + user_turn(text, tests)


def chat_messages(text: str, tests: list[str], n_shot: int = 3) -> list[dict]:
    msgs: list[dict] = []
    for e in EXEMPLARS[:n_shot]:
        msgs += [{"role": "user", "content": user_turn(e["text"], e["test_list"])},
                 {"role": "assistant", "content": f"{e['code']}\n[DONE]"}]
    return msgs + [{"role": "user", "content": user_turn(text, tests)}]


def extract_code(completion: str) -> str:
    """The program in a completion: text before ``[DONE]``, the first fenced block if there is one."""
    code = completion.split("[DONE]")[0]
    if "```" in code:
        m = _FENCE.search(code)
        if m:
            code = m.group(1)
    return code.replace("[BEGIN]", "").strip("\n")


class MBPP(CodeBenchmark):
    """Local files need ``task_id``, ``text``, ``code``, ``test_list`` (``test_setup_code`` optional)."""

    name = "mbpp"
    dataset_id = "google-research-datasets/mbpp"
    stop_strings = STOP_STRINGS

    def __init__(self, *, split: str = "test", n_shot: int = 3, **options: Any):
        super().__init__(**options)
        if not 0 <= int(n_shot) <= len(EXEMPLARS):
            raise RecdiffError(f"{self.name}: n_shot must be in 0..{len(EXEMPLARS)}, got {n_shot}")
        self.split, self.n_shot = split, int(n_shot)

    def _rows(self) -> tuple[list[dict], str]:
        return load_rows(self.name, self.path, self.dataset_id, "full", self.split,
                         ("task_id", "text", "code", "test_list"))

    def _problem(self, row: dict, index: int) -> Problem:
        return Problem(id=f"{self.name}/{row['task_id']}", question=row["text"], reference=row["code"],
                       meta={"test_list": list(row["test_list"]), "test_setup_code": row.get("test_setup_code") or ""})

    def render(self, problem: Problem, tokenizer: Any = None) -> str:
        tests = problem.meta["test_list"]
        if self.use_chat and has_chat_template(tokenizer):
            return apply_chat(tokenizer, chat_messages(problem.question, tests, self.n_shot))
        return render_plain(problem.question, tests, self.n_shot)

    def _jobs(self, problems: list[Problem], completions: list[str]) -> list:
        from recdiff.benchmarks.executor import Job

        return [Job(extract_code(c), tests=p.meta["test_setup_code"] + "\n" + "\n".join(p.meta["test_list"]))
                for p, c in zip(problems, completions)]
