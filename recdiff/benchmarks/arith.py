"""Embedded synthetic benchmark ``arith``: GSM8K-format arithmetic word problems.

Problems are generated from sentence templates and a seed: one or more named entities, 2-4 chained
operations (add, subtract, "k groups of m", "k times as many", equal split), every intermediate result
in 1..99 so that the embedded model can learn them.  The solution is written GSM8K-style and ends with
``#### N``; the question's sentences are written ``STEPS_PER_LINE`` to a line as one expression over the
previous line's result.  The default (0, the layout the shipped embedded model was trained on) writes the whole
chain in one line (``(48-28)*3+4*5=80``), so the first result digit needs 2-4 chained operations of latent
computation: that is what makes recurrence depth matter.  1 writes one sentence per line (``48-28=20``,
``20*3=60``, ``60+4*5=80``), which a 2-layer core solves within two recurrences.

Splits are deterministic and disjoint by construction: a question belongs to the test split iff the
first 8 bytes of its SHA-256 hash are divisible by ``TEST_MODULUS``; the train stream skips those.
The test split is the first ``n_problems`` distinct test questions drawn from ``seed``.

Scoring is GSM8K's: the last number in the completion (``flexible_extract``) against the reference.
The prompt format (``Q: <question>\\nA:``) and the completion format (`` <solution>\\n\\n`` + EOS) are
shared with the training recipe in :mod:`recdiff.tools.train`.
"""

from __future__ import annotations

import dataclasses
import functools
import random
import re
from dataclasses import dataclass, field
from typing import Iterator

from recdiff.benchmarks.splits import TEST_MODULUS, is_test_question, split_stream, take  # noqa: F401 (re-exported)

DEFAULT_SEED = 1234
DEFAULT_N_PROBLEMS = 1000  # size of the test split slice

NAMES_F = ["Ann", "Cara", "Eva", "Gia", "Ivy", "Kim", "Mia", "Nora", "Rosa", "Tina", "Uma", "Zoe"]
NAMES_M = ["Ben", "Dan", "Finn", "Hugo", "Jack", "Leo", "Max", "Noah", "Omar", "Paul", "Sam", "Tom"]
ITEMS = ["apples", "pens", "marbles", "stickers", "cards", "books", "shells", "coins",
         "candies", "toys", "cookies", "stamps", "beads", "rocks", "eggs", "plums"]
CONTAINERS = ["bags", "boxes", "packs", "jars", "baskets"]
MAX_VALUE = 99
STEPS_PER_LINE = 0         # solution sentences per written line (0: the whole chain in one line); see write_solution


@dataclass
class ArithProblem:
    question: str
    solution: str          # step lines + "#### N"
    answer: int
    n_ops: int
    steps: list = field(default_factory=list)   # (op, a, b[, c]) tuples used to recompute the answer


def _pronoun(name: str) -> str:
    return "She" if name in NAMES_F else "He"


def _make_problem(rng: random.Random, steps_per_line: int) -> ArithProblem:
    """One problem.  Rejection-free: every draw respects 1 <= value <= MAX_VALUE."""
    n_ops_target = rng.randint(2, 4)
    names = rng.sample(NAMES_F + NAMES_M, 3)
    subj, other, third = names
    item = rng.choice(ITEMS)
    v = rng.randint(5, 60)
    sentences = [f"{subj} has {v} {item}."]
    steps: list[tuple] = [("start", v)]
    n_ops = 0
    used_times = False
    while n_ops < n_ops_target:
        remaining = n_ops_target - n_ops
        choices = ["add", "sub", "split"] + ([] if used_times else ["times"])
        if remaining >= 2 and v + 4 <= MAX_VALUE:
            choices.append("groups")
        op = rng.choice(choices)
        p = _pronoun(subj)
        if op == "add":
            if v >= MAX_VALUE - 1:
                continue
            y = rng.randint(2, min(40, MAX_VALUE - v))
            sentences.append(rng.choice([f"{p} buys {y} more.", f"{p} finds {y} more.",
                                         f"{other} gives {subj} {y} more."]))
            steps.append(("add", v, y))
            v, n_ops = v + y, n_ops + 1
        elif op == "sub":
            if v < 4:
                continue
            y = rng.randint(2, min(40, v - 1))
            sentences.append(rng.choice([f"{p} gives {y} to {other}.", f"{p} loses {y}.",
                                         f"{p} sells {y}."]))
            steps.append(("sub", v, y))
            v, n_ops = v - y, n_ops + 1
        elif op == "groups":
            room = MAX_VALUE - v
            pairs = [(k, m) for k in range(2, 7) for m in range(2, 10) if k * m <= room]
            if not pairs:
                continue
            k, m = rng.choice(pairs)
            c = rng.choice(CONTAINERS)
            sentences.append(f"{p} buys {k} {c} of {m} each.")
            steps.append(("groups", v, k, m))
            v, n_ops = v + k * m, n_ops + 2
        elif op == "times":
            ks = [k for k in range(2, 6) if v * k <= MAX_VALUE]
            if not ks:
                continue
            k = rng.choice(ks)
            word = {2: "twice", 3: "3 times", 4: "4 times", 5: "5 times"}[k]
            sentences.append(f"{third} has {word} as many {item} as {subj}.")
            steps.append(("times", v, k))
            v, n_ops = v * k, n_ops + 1
            subj, third = third, subj
            used_times = True
        elif op == "split":
            ks = [k for k in range(2, 6) if v % k == 0 and v // k >= 1]
            if not ks:
                continue
            k = rng.choice(ks)
            sentences.append(f"{p} splits them into {k} equal piles and keeps one.")
            steps.append(("split", v, k))
            v, n_ops = v // k, n_ops + 1
    sentences.append(f"How many {item} does {subj} have now?")
    question = " ".join(sentences)
    solution = write_solution(steps, steps_per_line)
    return ArithProblem(question=question, solution=solution, answer=v, n_ops=n_ops, steps=steps)


def write_solution(steps: list, steps_per_line: int = 0) -> str:
    """GSM8K-style solution: the question's sentences in chunks of ``steps_per_line`` (0: all in one line), each
    chunk written as one expression over the previous line's result and evaluated (``(23+4*6-12)/5=7``), then
    ``#### N``.  Fewer lines means more chained operations behind each written result, i.e. more latent
    computation per token; the expression is ordinary arithmetic (Python's ``eval`` agrees with it)."""
    ops = steps[1:]
    chunk = len(ops) if steps_per_line <= 0 else steps_per_line
    v, lines = steps[0][1], []
    for i in range(0, len(ops), chunk):
        expr, additive = str(v), False  # additive: the top level of expr is a sum, so * and / need parentheses
        for s in ops[i:i + chunk]:
            op = s[0]
            if op in ("add", "sub", "groups"):
                expr += f"+{s[2]}*{s[3]}" if op == "groups" else f"{'+' if op == 'add' else '-'}{s[2]}"
                additive = True
            else:
                sym = "*" if op == "times" else "/"
                expr = (f"({expr})" if additive else expr) + f"{sym}{s[2]}"
                additive = False
            v = recompute_answer([s])  # each step records the value it starts from
        lines.append(f"{expr}={v}")
    return "\n".join(lines) + f"\n#### {v}"


def recompute_answer(steps: list) -> int:
    """The value after a problem's step list (each step records the value it starts from; the generator keeps
    its own running value, which the tests compare with this)."""
    v = None
    for s in steps:
        op = s[0]
        if op == "start":
            v = s[1]
        elif op == "add":
            v = s[1] + s[2]
        elif op == "sub":
            v = s[1] - s[2]
        elif op == "groups":
            v = s[1] + s[2] * s[3]
        elif op == "times":
            v = s[1] * s[2]
        elif op == "split":
            assert s[1] % s[2] == 0
            v = s[1] // s[2]
    return v


def iter_split(split: str, seed: int, steps_per_line: int | None = None) -> Iterator[ArithProblem]:
    """Infinite deterministic stream of distinct problems of one split ("train" or "test").  The questions do
    not depend on ``steps_per_line`` (default :data:`STEPS_PER_LINE`), only the written solutions do."""
    spl = STEPS_PER_LINE if steps_per_line is None else int(steps_per_line)
    return split_stream("arith", split, seed, lambda rng: _make_problem(rng, spl))


def generate_split(split: str, n: int, seed: int = DEFAULT_SEED,
                   steps_per_line: int | None = None) -> list[ArithProblem]:
    return take(iter_split(split, seed, steps_per_line), n)


# ---- prompt / completion format shared by training and evaluation ----------------------------------

def prompt_text(question: str) -> str:
    return f"Q: {question}\nA:"


def completion_text(solution: str) -> str:
    """Training target after the prompt (the tokenizer's EOS token is appended by the trainer)."""
    return f" {solution}\n\n"


STOP_STRINGS = ["\n\n", "\nQ:"]


# ---- benchmark registry class -----------------------------------------------------------------------

from recdiff.benchmarks import Benchmark, Problem, Score, register  # noqa: E402


def _fallback_flexible_extract(text: str):  # used only while recdiff.benchmarks.gsm8k does not exist
    nums = re.findall(r"(-?[$0-9.,]{2,})|(-?[0-9]+)", text)
    if not nums:
        return None
    a, b = nums[-1]
    return (a or b).strip().rstrip(".")


def _normalize(num: str | None) -> str | None:
    if num is None:
        return None
    s = str(num).replace(",", "").replace("$", "").strip().rstrip(".")
    try:
        f = float(s)
    except ValueError:
        return s
    return str(int(f)) if f == int(f) else str(f)


@functools.lru_cache(maxsize=4)
def _split_rows(split: str, n: int, seed: int) -> tuple[dict, ...]:
    """A split's rows, generated once per process (a thousand test problems draw about 8000: ~0.4 s), for every
    trial a sweep process runs on it; :meth:`ArithBenchmark._rows` hands out copies."""
    return tuple({"question": p.question, "solution": p.solution, "answer": p.answer, "n_ops": p.n_ops,
                  "steps": p.steps} for p in generate_split(split, n, seed))


@register("arith")
class ArithBenchmark(Benchmark):
    """``get_benchmark("arith", split="test", n_problems=1000, seed=1234, limit=None, offset=0)``.

    ``seed`` is the generator seed of the split (the test split of seed 1234 is the one the embedded model was
    never trained on; training draws from the disjoint train split); ``n_problems`` distinct problems are
    generated, then ``offset``/``limit`` (and an optional seeded ``subsample``) select the slice.
    """

    name = "arith"
    stop_strings = list(STOP_STRINGS)

    def __init__(self, *, split: str = "test", n_problems: int = DEFAULT_N_PROBLEMS, seed: int = DEFAULT_SEED,
                 **options):
        if split not in ("train", "test"):
            from recdiff.errors import RecdiffError
            raise RecdiffError(f"arith: unknown split {split!r} (expected 'train' or 'test')")
        if int(n_problems) < 1:
            from recdiff.errors import RecdiffError
            raise RecdiffError(f"arith: n_problems must be >= 1, got {n_problems}")
        options.pop("path", None)  # generated in-process, nothing to read
        super().__init__(seed=seed, **options)
        self.split, self.n_problems = split, int(n_problems)

    def _rows(self) -> tuple[list[dict], str]:
        rows = [{**row, "steps": list(row["steps"])} for row in _split_rows(self.split, self.n_problems, self.seed)]
        return rows, f"arith:{self.split}:seed={self.seed}:n={self.n_problems}"

    def _problem(self, row: dict, index: int) -> Problem:
        return Problem(id=f"arith-{self.split}-{self.seed}-{index}", question=row["question"],
                       reference=str(row["answer"]), meta={"solution": row["solution"], "n_ops": row["n_ops"],
                                                                    "steps": row["steps"]})

    def render(self, problem: Problem, tokenizer=None) -> str:
        return prompt_text(problem.question)  # the embedded model's training format; no chat template

    def score_all(self, problems: list, completions: list) -> list:
        self._check_lengths(problems, completions)
        try:
            from recdiff.benchmarks.gsm8k import flexible_extract
        except ImportError:  # pragma: no cover - until the gsm8k module exists
            flexible_extract = _fallback_flexible_extract
        out = []
        for p, c in zip(problems, completions):
            extracted = flexible_extract(c)
            ok = extracted is not None and _normalize(extracted) == _normalize(p.reference)
            out.append(Score(correct=bool(ok), extracted=None if extracted is None else str(extracted),
                             detail={"reference": p.reference}))
        return out


# ---- training data (recdiff.tools.train: data.task=arith, conf/train/embedded_arith.yaml) ----------------------

class Curriculum:
    """Solution layout per training problem: during the first ``frac`` of the run the share of problems written
    in the final layout (``steps_per_line``) rises linearly from 0 to 1, the others are written ``start``
    steps per line (one operation per written result: easy to learn, then composed into longer chains)."""

    def __init__(self, steps_per_line: int, start: int, frac: float, seed: int) -> None:
        self.final, self.start, self.frac = steps_per_line, start, frac
        self.rng = random.Random(f"curriculum/{seed}")

    def __call__(self, problem: ArithProblem, progress: float) -> ArithProblem:
        share = 1.0 if self.frac <= 0 else min(progress / self.frac, 1.0)
        spl = self.final if self.rng.random() < share else self.start
        if spl == self.final:
            return problem  # the stream already writes the final layout
        return dataclasses.replace(problem, solution=write_solution(problem.steps, spl))


class TrainingData:
    """The previous embedded model's data: train-split word problems, byte-level BPE trained on the first
    ``tokenizer.corpus`` of them, curriculum on the layout (:class:`Curriculum`)."""

    def __init__(self, cfg: dict) -> None:
        d = cfg["data"]
        self.cfg, self.seed = cfg, int(cfg["data_seed"])
        self.spl = int(d.get("steps_per_line", STEPS_PER_LINE))
        self.curriculum = Curriculum(self.spl, int(d.get("curriculum_start", 1)), float(d.get("curriculum_frac", 0.0)),
                                     self.seed)

    def tokenizer(self):
        from recdiff.tokenizer import build_tokenizer

        tc = self.cfg.get("tokenizer") or {}
        corpus = generate_split("train", int(tc.get("corpus", 20000)), seed=self.seed, steps_per_line=self.spl)
        return build_tokenizer([self.texts(p)[0] + self.texts(p)[1] for p in corpus],
                               vocab_size=int(tc.get("vocab_size", 512)))

    @staticmethod
    def texts(problem: ArithProblem) -> tuple[str, str]:
        return prompt_text(problem.question), completion_text(problem.solution)

    def stream(self, worker: int = 0):
        """(problem given the run's progress) for the train split; ``worker`` > 0 draws from its own stream."""
        it = iter_split("train", self.seed + 1000 * worker, self.spl)
        return lambda progress, level: self.curriculum(next(it), progress)

    def eval_problems(self, n: int) -> list:
        return generate_split("test", n, seed=DEFAULT_SEED, steps_per_line=self.spl)

    @staticmethod
    def difficulty(problem: ArithProblem) -> int:
        return problem.n_ops
