"""Embedded synthetic benchmark ``compose``: compositions of fixed digit permutations, GSM8K-format answers.

The task is defined by :data:`PERMUTATIONS`: eight derangements of the digits 0-9 (no digit maps to itself), drawn
once from :data:`PERMUTATION_SEED` and named by the letters ``a``-``h``. They are learned into the weights; a prompt
never lists them. A problem is a start digit followed by ``K`` letters, and its answer is the digit reached by
applying the letters' functions from left to right::

    Q: 7cbag            (7 → c(7) → b(·) → a(·) → g(·))

Why depth pays: the value after each prefix is computed at that prefix's own position from the previous position's
state — one previous-position attention and one table look-up, i.e. one function per recurrence of a one-layer core.
During a prefill every position runs its recurrences in parallel, so the answer at the last letter needs about ``K``
recurrences: accuracy by ``r`` rises as ``r`` covers more of the ``K`` range (1..:data:`MAX_K` in the test split).

Completion formats (:data:`FORMATS`; the shipped model's is :data:`DEFAULT_FORMAT`):

- ``direct``: ``3\\n#### 3\\n\\n`` — the answer digit first (predicted at the last letter), 10 tokens;
- ``long``: ``3\\nThe value is 3.\\n#### 3\\n\\n`` — the same first token, then a sentence and the GSM8K line, 26
  tokens, so that a sampler's wavefront has room to work (as on GSM8K chains of thought);
- ``restate``: ``7cbag = 3\\n#### 3\\n\\n`` — the question restated before the value, ``K + 14`` tokens, so that the
  value can be recomputed along generated positions (depth spent while decoding, not only in the prefill).

Tokenizer: byte level without merges (:func:`recdiff.tokenizer.build_byte_tokenizer`): every digit and letter is
one token.

Splits are deterministic and disjoint: a question is in the test split iff the first 8 bytes of its SHA-256 hash are
≡ 0 mod :data:`TEST_MODULUS`. The test split draws ``K`` uniformly from 1..``max_k``; training streams draw from the
rest (:class:`TrainingData`, with a curriculum on ``K``). Scoring is GSM8K's answer line: the number after the last
``####`` against the reference.

A checkpoint trained on this task carries the task's definition (:func:`write_definition` → ``compose.json`` in its
folder); :class:`ComposeBenchmark` refuses a model whose file names other permutations, so that a model and its task
cannot drift apart.
"""

from __future__ import annotations

import functools
import json
import random
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from recdiff.benchmarks import Benchmark, Problem, Score, register
from recdiff.benchmarks.splits import TEST_MODULUS, is_test_question, split_stream, take  # noqa: F401 (TEST_MODULUS re-exported)
from recdiff.errors import RecdiffError

DEFAULT_SEED = 1234          # the test split's generator seed (held out from training by the hash rule anyway)
DEFAULT_N_PROBLEMS = 1000
MAX_K = 24                   # letters in the hardest problems (test split: K uniform in 1..MAX_K)
PERMUTATION_SEED = 0
N_FUNCTIONS = 8
LETTERS = string.ascii_lowercase[:N_FUNCTIONS]
DEFINITION_FILE = "compose.json"
STOP_STRINGS = ["\n\n", "\nQ:"]
ANSWER_RE = re.compile(r"####\s*(-?\d+)")


def draw_permutations(seed: int = PERMUTATION_SEED) -> dict[str, tuple[int, ...]]:
    """Eight derangements of 0-9 by rejection sampling from ``random.Random(f"compose/permutations/{seed}")``."""
    rng = random.Random(f"compose/permutations/{seed}")
    out: dict[str, tuple[int, ...]] = {}
    for letter in LETTERS:
        while True:
            perm = list(range(10))
            rng.shuffle(perm)
            if all(perm[d] != d for d in range(10)):
                out[letter] = tuple(perm)
                break
    return out


PERMUTATIONS: dict[str, tuple[int, ...]] = draw_permutations()


def apply(start: int, letters: str, perms: dict[str, tuple[int, ...]] = PERMUTATIONS) -> int:
    """The digit reached from ``start`` by applying each letter's function, left to right."""
    v = start
    for c in letters:
        v = perms[c][v]
    return v


@dataclass(frozen=True)
class ComposeProblem:
    start: int
    letters: str

    @property
    def question(self) -> str:
        return f"{self.start}{self.letters}"

    @property
    def k(self) -> int:
        return len(self.letters)

    @property
    def answer(self) -> int:
        return apply(self.start, self.letters)


def parse_question(question: str) -> ComposeProblem:
    if not re.fullmatch(rf"\d[{LETTERS}]+", question):
        raise ValueError(f"compose: not a question: {question!r}")
    return ComposeProblem(int(question[0]), question[1:])


# ---- prompt / completion formats shared by training and evaluation -----------------------------------

def prompt_text(question: str) -> str:
    return f"Q: {question}"  # ends with the last letter: the state there predicts the answer


FORMATS: dict[str, Callable[[ComposeProblem], str]] = {
    "direct": lambda p: f"{p.answer}\n#### {p.answer}\n\n",
    "long": lambda p: f"{p.answer}\nThe value is {p.answer}.\n#### {p.answer}\n\n",
    "restate": lambda p: f"{p.question} = {p.answer}\n#### {p.answer}\n\n",
}
DEFAULT_FORMAT = "long"


def completion_text(problem: ComposeProblem, fmt: str = DEFAULT_FORMAT) -> str:
    """Training target after the prompt (the tokenizer's EOS token is appended by the trainer)."""
    if fmt not in FORMATS:
        raise RecdiffError(f"compose: unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return FORMATS[fmt](problem)


# ---- splits ------------------------------------------------------------------------------------------

def make_problem(rng: random.Random, max_k: int = MAX_K, k: int | None = None) -> ComposeProblem:
    k = rng.randint(1, max_k) if k is None else k
    return ComposeProblem(rng.randrange(10), "".join(rng.choice(LETTERS) for _ in range(k)))


def iter_split(split: str, seed: int, max_k: int = MAX_K) -> Iterator[ComposeProblem]:
    """Infinite deterministic stream of one split ("train" or "test"); test questions are distinct."""
    return split_stream("compose", split, seed, lambda rng: make_problem(rng, max_k))


def generate_split(split: str, n: int, seed: int = DEFAULT_SEED, max_k: int = MAX_K) -> list[ComposeProblem]:
    return take(iter_split(split, seed, max_k), n)


# ---- the task's definition inside a checkpoint folder ------------------------------------------------

def definition(fmt: str = DEFAULT_FORMAT) -> dict[str, Any]:
    return {"task": "compose", "permutation_seed": PERMUTATION_SEED,
            "permutations": {c: list(p) for c, p in PERMUTATIONS.items()}, "format": fmt,
            "prompt": prompt_text("<start digit><letters>"), "max_k": MAX_K}


def write_definition(folder: str | Path, fmt: str = DEFAULT_FORMAT) -> None:
    (Path(folder) / DEFINITION_FILE).write_text(json.dumps(definition(fmt), indent=2) + "\n")


def check_definition(folder: str | Path) -> None:
    """One-line error when ``folder`` holds a compose definition other than this module's permutations."""
    f = Path(folder) / DEFINITION_FILE
    if not f.is_file():
        return
    try:
        perms = {c: tuple(p) for c, p in json.loads(f.read_text())["permutations"].items()}
    except (ValueError, KeyError, TypeError) as e:
        raise RecdiffError(f"compose: {f} is not a compose definition ({e})") from None
    if perms != PERMUTATIONS:
        raise RecdiffError(f"compose: the model at {folder} was trained on other permutations than "
                           f"recdiff.benchmarks.compose defines ({f}); its answers cannot be scored here")


# ---- benchmark registry class --------------------------------------------------------------------------

@functools.lru_cache(maxsize=4)
def _split_rows(split: str, n: int, seed: int, max_k: int) -> tuple[dict, ...]:
    """A split's rows, generated once per process for every trial a sweep process runs on it (as arith's)."""
    return tuple({"question": p.question, "answer": p.answer, "k": p.k} for p in generate_split(split, n, seed, max_k))


@register("compose")
class ComposeBenchmark(Benchmark):
    """``get_benchmark("compose", split="test", n_problems=1000, seed=1234, max_k=24, limit=None, offset=0)``.

    ``n_problems`` distinct problems of the split are generated from ``seed``, then ``offset``/``limit`` (and an
    optional seeded ``subsample``) select the slice. Every problem's ``meta["k"]`` is its difficulty."""

    name = "compose"
    stop_strings = list(STOP_STRINGS)
    difficulty_key = "k"

    def __init__(self, *, split: str = "test", n_problems: int = DEFAULT_N_PROBLEMS, seed: int = DEFAULT_SEED,
                 max_k: int = MAX_K, **options):
        if split not in ("train", "test"):
            raise RecdiffError(f"compose: unknown split {split!r} (expected 'train' or 'test')")
        for key, val in (("n_problems", n_problems), ("max_k", max_k)):
            if not isinstance(val, int) or isinstance(val, bool) or val < 1:
                raise RecdiffError(f"compose: {key} must be an integer >= 1, got {val!r}")
        options.pop("path", None)  # generated in-process, nothing to read
        super().__init__(seed=seed, **options)
        self.split, self.n_problems, self.max_k = split, n_problems, max_k

    def _rows(self) -> tuple[list[dict], str]:
        rows = [dict(row) for row in _split_rows(self.split, self.n_problems, self.seed, self.max_k)]
        return rows, f"compose:{self.split}:seed={self.seed}:n={self.n_problems}:max_k={self.max_k}"

    def _problem(self, row: dict, index: int) -> Problem:
        return Problem(id=f"compose-{self.split}-{self.seed}-{index}", question=row["question"],
                       reference=str(row["answer"]), meta={"k": row["k"]})

    def check_model(self, folder: Any) -> None:
        check_definition(folder)

    def render(self, problem: Problem, tokenizer=None) -> str:
        return prompt_text(problem.question)  # the embedded model's training format; no chat template

    def score_all(self, problems: list, completions: list) -> list:
        self._check_lengths(problems, completions)
        out = []
        for p, c in zip(problems, completions):
            found = ANSWER_RE.findall(c)
            extracted = found[-1] if found else None
            out.append(Score(correct=extracted is not None and int(extracted) == int(p.reference),
                             extracted=extracted, detail={"reference": p.reference}))
        return out


# ---- training data (recdiff.tools.train: data.task=compose) ----------------------------------------------------

class TrainingData:
    """Train-split problems for :mod:`recdiff.tools.train`, byte tokenizer, curriculum on the largest ``K``.

    Curriculum: the *level* (largest K; K uniform in 1..level) starts at ``data.curriculum_start`` and goes up by
    one whenever the running exact match of the training batches reaches ``data.curriculum_threshold``, up to
    ``data.max_k``. ``data.format`` picks the completion (:data:`FORMATS`)."""

    def __init__(self, cfg: dict) -> None:
        d = cfg["data"]
        self.seed = int(cfg["data_seed"])
        self.fmt = str(d.get("format", DEFAULT_FORMAT))
        completion_text(ComposeProblem(0, "a"), self.fmt)  # one-line error for an unknown format
        self.max_level = int(d.get("max_k", MAX_K))
        self.threshold = float(d.get("curriculum_threshold", 0.8))

    def tokenizer(self):
        from recdiff.tokenizer import build_byte_tokenizer

        return build_byte_tokenizer()

    def texts(self, problem: ComposeProblem) -> tuple[str, str]:
        return prompt_text(problem.question), completion_text(problem, self.fmt)

    def stream(self, worker: int = 0) -> Callable[[float, int], ComposeProblem]:
        rng = random.Random(f"compose/train/{self.seed}/{worker}")

        def draw(progress: float, level: int) -> ComposeProblem:
            while True:  # the train split: everything the test split does not hold
                p = make_problem(rng, max(1, min(level, self.max_level)))
                if not is_test_question(p.question):
                    return p

        return draw

    def eval_problems(self, n: int) -> list[ComposeProblem]:
        return generate_split("test", n, seed=DEFAULT_SEED, max_k=self.max_level)

    @staticmethod
    def difficulty(problem: ComposeProblem) -> int:
        return problem.k

    def save(self, folder: Path) -> None:
        write_definition(folder, self.fmt)
