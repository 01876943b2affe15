"""GSM8K, chain-of-thought 8-shot, scored like lm-evaluation-harness's ``gsm8k_cot`` task.

Format followed: lm-eval ``gsm8k_cot`` (the 8 chain-of-thought exemplars of Wei et al. 2022, each as
``Q: <question>\\nA: <reasoning> The answer is N.``, joined by a blank line, stop at ``Q:``).  As the
authors ran it on the chat model: the tokenizer's chat template, system prompt "You are a helpful
assistant that can assist users with mathematical reasoning." and the few-shot examples as alternating
user / assistant turns (lm-eval ``--apply_chat_template --fewshot_as_multiturn``).  Without a chat
template (or with ``use_chat=false``) the prompt is lm-eval's plain few-shot text, without system prompt.

Scoring reproduces lm-eval exactly, quirks included:

* ``flexible-extract``: regex ``(-?[$0-9.,]{2,})|(-?[0-9]+)``, *last* match, first non-empty group.
* ``strict-match``: regex ``The answer is (\\-?[0-9\\.\\,]+).``, *first* match (the final ``.`` is a
  regex wildcard, so ``The answer is 18`` at the very end extracts ``1``).
* ``exact_match`` with ``regexes_to_ignore = [",", "\\$", "(?s).*#### ", "\\.$"]`` applied in that order
  to prediction and reference, then lower-cased; ``$1,250.00.`` becomes ``1250.00`` != ``1250``.

The headline metric (``Score.correct``) is flexible-extract, as in the paper; strict-match is in ``detail``.
"""

from __future__ import annotations

import re
from typing import Any

from recdiff.benchmarks import Benchmark, Problem, Score, apply_chat, has_chat_template
from recdiff.benchmarks.data import load_rows
from recdiff.errors import RecdiffError

SYSTEM_PROMPT = "You are a helpful assistant that can assist users with mathematical reasoning."

# lm-eval gsm8k_cot few-shot exemplars (question, target), in order ("first_n" sampler).
EXEMPLARS: list[tuple[str, str]] = [
    ("There are 15 trees in the grove. Grove workers will plant trees in the grove today. After they are "
     "done, there will be 21 trees. How many trees did the grove workers plant today?",
     "There are 15 trees originally. Then there were 21 trees after some more were planted. So there must "
     "have been 21 - 15 = 6. The answer is 6."),
    ("If there are 3 cars in the parking lot and 2 more cars arrive, how many cars are in the parking lot?",
     "There are originally 3 cars. 2 more cars arrive. 3 + 2 = 5. The answer is 5."),
    ("Leah had 32 chocolates and her sister had 42. If they ate 35, how many pieces do they have left in "
     "total?",
     "Originally, Leah had 32 chocolates. Her sister had 42. So in total they had 32 + 42 = 74. After "
     "eating 35, they had 74 - 35 = 39. The answer is 39."),
    ("Jason had 20 lollipops. He gave Denny some lollipops. Now Jason has 12 lollipops. How many lollipops "
     "did Jason give to Denny?",
     "Jason started with 20 lollipops. Then he had 12 after giving some to Denny. So he gave Denny "
     "20 - 12 = 8. The answer is 8."),
    ("Shawn has five toys. For Christmas, he got two toys each from his mom and dad. How many toys does he "
     "have now?",
     "Shawn started with 5 toys. If he got 2 toys each from his mom and dad, then that is 4 more toys. "
     "5 + 4 = 9. The answer is 9."),
    ("There were nine computers in the server room. Five more computers were installed each day, from "
     "monday to thursday. How many computers are now in the server room?",
     "There were originally 9 computers. For each of 4 days, 5 more computers were added. So 5 * 4 = 20 "
     "computers were added. 9 + 20 is 29. The answer is 29."),
    ("Michael had 58 golf balls. On tuesday, he lost 23 golf balls. On wednesday, he lost 2 more. How many "
     "golf balls did he have at the end of wednesday?",
     "Michael started with 58 golf balls. After losing 23 on tuesday, he had 58 - 23 = 35. After losing 2 "
     "more, he had 35 - 2 = 33 golf balls. The answer is 33."),
    ("Olivia has $23. She bought five bagels for $3 each. How much money does she have left?",
     "Olivia had 23 dollars. 5 bagels for 3 dollars each will be 5 x 3 = 15 dollars. So she has 23 - 15 "
     "dollars left. 23 - 15 is 8. The answer is 8."),
]

STOP_STRINGS = ["Q:", "</s>", "<|im_end|>", "<|end_turn|>"]

FLEXIBLE_RE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
STRICT_RE = re.compile(r"The answer is (\-?[0-9\.\,]+).")
IGNORE_RES = [",", r"\$", r"(?s).*#### ", r"\.$"]


def flexible_extract(text: str) -> str | None:
    """lm-eval flexible-extract: last regex match, first non-empty group, stripped (None = ``[invalid]``)."""
    matches = FLEXIBLE_RE.findall(text)
    if not matches:
        return None
    groups = [g for g in matches[-1] if g]
    return groups[0].strip() if groups else None


def strict_extract(text: str) -> str | None:
    """lm-eval strict-match: first ``The answer is N.`` match (None = ``[invalid]``)."""
    matches = STRICT_RE.findall(text)
    return matches[0].strip() if matches else None


def normalize(s: str) -> str:
    """lm-eval ``exact_match`` normalisation for gsm8k_cot: ignore regexes in order, then lower-case."""
    for pattern in IGNORE_RES:
        s = re.sub(pattern, "", s)
    return s.lower()


def reference_answer(answer: str) -> str:
    """The GSM8K reference: the text after ``####`` (lm-eval ``doc_to_target``) without ``,``."""
    return answer.split("####")[-1].strip().replace(",", "")


def is_match(extracted: str | None, reference: str) -> bool:
    """lm-eval exact_match of an extracted answer (None = no match, never correct) against a reference."""
    return extracted is not None and normalize(extracted) == normalize(reference)


def score_completion(completion: str, reference: str) -> Score:
    flex, strict = flexible_extract(completion), strict_extract(completion)
    return Score(correct=is_match(flex, reference), extracted=flex,
                 detail={"flexible_extract": is_match(flex, reference),
                         "strict_match": is_match(strict, reference), "strict_extracted": strict})


def user_turn(question: str) -> str:
    return f"Q: {question}\nA:"


def render_plain(question: str, n_shot: int = 8) -> str:
    shots = "".join(f"{user_turn(q)} {t}\n\n" for q, t in EXEMPLARS[:n_shot])
    return shots + user_turn(question)


def chat_messages(question: str, n_shot: int = 8, system_prompt: str | None = SYSTEM_PROMPT) -> list[dict]:
    msgs = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for q, t in EXEMPLARS[:n_shot]:
        msgs += [{"role": "user", "content": user_turn(q)}, {"role": "assistant", "content": t}]
    return msgs + [{"role": "user", "content": user_turn(question)}]


class GSM8K(Benchmark):
    """``openai/gsm8k`` (config ``main``, split ``test``); local files need ``question`` and ``answer``."""

    name = "gsm8k"
    dataset_id = "openai/gsm8k"
    stop_strings = STOP_STRINGS

    def __init__(self, *, split: str = "test", n_shot: int = 8, system_prompt: str | None = SYSTEM_PROMPT,
                 **options: Any):
        super().__init__(**options)
        if not 0 <= int(n_shot) <= len(EXEMPLARS):
            raise RecdiffError(f"{self.name}: n_shot must be in 0..{len(EXEMPLARS)}, got {n_shot}")
        self.split, self.n_shot, self.system_prompt = split, int(n_shot), system_prompt

    def _rows(self) -> tuple[list[dict], str]:
        return load_rows(self.name, self.path, self.dataset_id, "main", self.split, ("question", "answer"))

    def _problem(self, row: dict, index: int) -> Problem:
        return Problem(id=f"{self.name}/{self.split}/{index}", question=row["question"],
                       reference=reference_answer(row["answer"]), meta={"answer": row["answer"]})

    def render(self, problem: Problem, tokenizer: Any = None) -> str:
        if self.use_chat and has_chat_template(tokenizer):
            return apply_chat(tokenizer, chat_messages(problem.question, self.n_shot, self.system_prompt))
        return render_plain(problem.question, self.n_shot)

    def score_all(self, problems: list[Problem], completions: list[str]) -> list[Score]:
        self._check_lengths(problems, completions)
        return [score_completion(c, p.reference) for p, c in zip(problems, completions)]
