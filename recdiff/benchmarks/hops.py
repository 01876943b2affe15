"""Embedded synthetic benchmark ``hops``: K-hop variable look-ups with GSM8K-format answers.

A problem states three chains of copies, interleaved at random, each starting from a digit, and asks for four
variables::

    Q: x=4;m=7;d=x;q=d;c=m;b=q;?b,c,x,q
    A: b=4,c=7,x=4,q=4
    #### 4744

``b=q`` means "b has the value of q". The *main* chain has ``K`` links (its last variable sits ``K`` look-ups
from its digit); two distractor chains have 1..max(1, K-1) links; the four asked variables are the main chain's
last one, one of each distractor chain and one more (a digit's own name only where no linked one is left), in
random order. The answer line gives each value; ``#### N`` repeats the four digits.

Why this task: resolving a variable ``K`` links from its digit needs ``K`` sequential look-ups, and a
transformer does about one look-up per attention layer. Every statement names a variable stated before it, so the
look-ups can run inside the prompt (each statement's state takes the value of the statement it names), where a
causal model can do them in parallel for all statements, one link per layer. With a one-layer core each recurrence adds about one,
so the depth a problem needs grows with ``K`` (up to ``MAX_HOPS``) and accuracy by r rises as r covers more of
the K range: the trade-off the project measures. Copies of digits, not sums: modular sums are parity-like and
gradient descent learns them very slowly.

Names are the letters a-z and A-Z except ``Q`` and ``A`` (the prompt markers); the question uses ``?`` rather
than words so that no letter appears outside the statements. The tokenizer is byte level without merges, so
every name, digit and symbol is one token.

Splits are deterministic and disjoint: a question belongs to the test split iff the first 8 bytes of its
SHA-256 hash are divisible by ``TEST_MODULUS``. The test split draws K uniformly from 1..``max_hops``; the
training stream takes ``max_hops`` per problem (a curriculum).

Scoring: the last number in the completion against the reference (all four digits must be right).
"""

from __future__ import annotations

import hashlib
import random
import string
from dataclasses import dataclass, field
from typing import Iterator

TEST_MODULUS = 8
DEFAULT_SEED = 1234
DEFAULT_N_PROBLEMS = 1000
MAX_HOPS = 16              # K of the hardest problems (test split: K uniform in 1..MAX_HOPS)
N_CHAINS = 3               # the main chain and two distractors, each rooted at a different digit
N_ASKED = 4
NAMES = [c for c in string.ascii_lowercase + string.ascii_uppercase if c not in "QA"]  # 50 single-byte names
STOP_STRINGS = ["\n\n", "\nQ:"]


@dataclass
class HopsProblem:
    question: str          # the statements and the asked names (what follows "Q: ")
    solution: str          # "b=4,c=7,x=4,q=4\n#### 4744"
    answer: str            # "4744"
    hops: int              # K: links between the main chain's digit and its last variable
    asked_hops: list[int] = field(default_factory=list)  # links from its digit for each asked variable


def make_problem(rng: random.Random, max_hops: int = MAX_HOPS, hops: int | None = None) -> HopsProblem:
    """One problem; ``hops`` fixes K (else uniform in 1..max_hops)."""
    k = rng.randint(1, max_hops) if hops is None else hops
    lengths = [k] + [rng.randint(1, max(1, k - 1)) for _ in range(N_CHAINS - 1)]
    names = rng.sample(NAMES, sum(n + 1 for n in lengths))
    digits = rng.sample(range(1, 10), N_CHAINS)
    value: dict[str, int] = {}
    depth: dict[str, int] = {}
    chains: list[list[str]] = []
    for length, digit in zip(lengths, digits):
        chain, names = names[: length + 1], names[length + 1:]
        for d, name in enumerate(chain):
            value[name], depth[name] = digit, d
        chains.append(chain)
    # a random interleaving of the chains, each written from its digit on: every statement names a variable
    # stated before it, so a causal model can resolve each statement from earlier ones, one link per layer
    todo = [[f"{c[0]}={value[c[0]]}"] + [f"{b}={a}" for a, b in zip(c, c[1:])] for c in chains]
    statements: list[str] = []
    while any(todo):
        pick = rng.choices(range(len(todo)), weights=[len(t) for t in todo])[0]
        statements.append(todo[pick].pop(0))
    # the main chain's last variable, one linked variable of each distractor, then any other
    asked = [chains[0][-1]] + [rng.choice(c[1:]) for c in chains[1:]]
    rest = [n for c in chains for n in c[1:] if n not in asked] or [c[0] for c in chains]
    asked += rng.sample(rest, N_ASKED - len(asked))
    rng.shuffle(asked)
    question = ";".join(statements) + ";?" + ",".join(asked)
    answer = "".join(str(value[n]) for n in asked)
    solution = ",".join(f"{n}={value[n]}" for n in asked) + f"\n#### {answer}"
    return HopsProblem(question=question, solution=solution, answer=answer, hops=k,
                       asked_hops=[depth[n] for n in asked])


def resolve(question: str) -> dict[str, int]:
    """Every variable's value, by following the statements (independent of the generator; used by tests)."""
    body = question.split(";?")[0]
    links = dict(s.split("=") for s in body.split(";"))
    out: dict[str, int] = {}
    for name in links:
        seen, cur = [], name
        while not links[cur].isdigit():
            seen.append(cur)
            cur = links[cur]
            if cur in seen:
                raise ValueError(f"cycle at {cur}")
        out[name] = int(links[cur])
    return out


def is_test_question(question: str) -> bool:
    return int.from_bytes(hashlib.sha256(question.encode()).digest()[:8], "big") % TEST_MODULUS == 0


def iter_split(split: str, seed: int, max_hops: int = MAX_HOPS) -> Iterator[HopsProblem]:
    """Infinite deterministic stream of one split ("train" or "test"); test questions are distinct."""
    if split not in ("train", "test"):
        raise ValueError(f"hops: unknown split {split!r} (train, test)")
    rng = random.Random(f"hops/{split}/{seed}")
    want_test, seen = split == "test", set()
    while True:
        p = make_problem(rng, max_hops)
        if is_test_question(p.question) != want_test or p.question in seen:
            continue
        if want_test:
            seen.add(p.question)
        yield p


def generate_split(split: str, n: int, seed: int = DEFAULT_SEED, max_hops: int = MAX_HOPS) -> list[HopsProblem]:
    out = []
    for p in iter_split(split, seed, max_hops):
        out.append(p)
        if len(out) >= n:
            break
    return out


# ---- prompt / completion format shared by training and evaluation ----------------------------------

def prompt_text(question: str) -> str:
    return f"Q: {question}\nA:"


def completion_text(solution: str) -> str:
    """Training target after the prompt (the tokenizer's EOS token is appended by the trainer)."""
    return f" {solution}\n\n"


# ---- benchmark registry class -----------------------------------------------------------------------

from recdiff.benchmarks import Benchmark, Problem, Score, register  # noqa: E402
from recdiff.errors import RecdiffError  # noqa: E402


@register("hops")
class HopsBenchmark(Benchmark):
    """``get_benchmark("hops", split="test", n_problems=1000, seed=1234, max_hops=16, limit=None, offset=0)``.

    The test split of seed 1234 is held out from the embedded model's training (disjoint by construction);
    ``n_problems`` distinct problems are generated, then ``offset``/``limit`` select the slice.
    """

    name = "hops"
    stop_strings = list(STOP_STRINGS)

    def __init__(self, *, split: str = "test", n_problems: int = DEFAULT_N_PROBLEMS, seed: int = DEFAULT_SEED,
                 max_hops: int = MAX_HOPS, **options):
        if split not in ("train", "test"):
            raise RecdiffError(f"hops: unknown split {split!r} (expected 'train' or 'test')")
        for key, val in (("n_problems", n_problems), ("max_hops", max_hops)):
            if not isinstance(val, int) or isinstance(val, bool) or val < 1:
                raise RecdiffError(f"hops: {key} must be an integer >= 1, got {val!r}")
        if max_hops + 1 + (N_CHAINS - 1) * max(2, max_hops) > len(NAMES):
            raise RecdiffError(f"hops: max_hops={max_hops} needs more than the {len(NAMES)} variable names")
        options.pop("path", None)  # generated in-process, nothing to read
        super().__init__(seed=seed, **options)
        self.split, self.n_problems, self.max_hops = split, n_problems, max_hops

    def _rows(self) -> tuple[list[dict], str]:
        raw = generate_split(self.split, self.n_problems, self.seed, self.max_hops)
        rows = [{"question": p.question, "solution": p.solution, "answer": p.answer, "hops": p.hops,
                 "asked_hops": p.asked_hops} for p in raw]
        return rows, f"hops:{self.split}:seed={self.seed}:n={self.n_problems}:max_hops={self.max_hops}"

    def _problem(self, row: dict, index: int) -> Problem:
        return Problem(id=f"hops-{self.split}-{self.seed}-{index}", question=row["question"], reference=row["answer"],
                       meta={"solution": row["solution"], "hops": row["hops"], "asked_hops": row["asked_hops"]})

    def render(self, problem: Problem, tokenizer=None) -> str:
        return prompt_text(problem.question)  # the embedded model's training format; no chat template

    def score_all(self, problems: list, completions: list) -> list:
        from recdiff.benchmarks.gsm8k import flexible_extract

        self._check_lengths(problems, completions)
        out = []
        for p, c in zip(problems, completions):
            extracted = flexible_extract(c)
            out.append(Score(correct=extracted is not None and extracted == p.reference,
                             extracted=extracted, detail={"reference": p.reference}))
        return out
