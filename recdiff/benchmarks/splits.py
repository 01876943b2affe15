"""Deterministic, disjoint train/test splits of the generated benchmarks (``arith``, ``compose``).

A question is in the test split iff the first 8 bytes of its SHA-256 hash are ≡ 0 mod :data:`TEST_MODULUS`, so the
splits are disjoint by construction whatever the seed; a split's stream is drawn from ``random.Random(
"<benchmark>/<split>/<seed>")``, and the test stream never repeats a question.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from typing import Callable, Iterator, Protocol, TypeVar

TEST_MODULUS = 8  # 1/8 of the question space is reserved for the test split


class HasQuestion(Protocol):
    question: str


P = TypeVar("P", bound=HasQuestion)


def is_test_question(question: str) -> bool:
    return int.from_bytes(hashlib.sha256(question.encode()).digest()[:8], "big") % TEST_MODULUS == 0


def split_stream(benchmark: str, split: str, seed: int, make: Callable[[random.Random], P]) -> Iterator[P]:
    """Infinite stream of ``make(rng)`` problems of one split ("train" or "test"); test questions are distinct."""
    if split not in ("train", "test"):
        raise ValueError(f"{benchmark}: unknown split {split!r} (train, test)")
    rng = random.Random(f"{benchmark}/{split}/{seed}")
    want_test, seen = split == "test", set()
    while True:
        p = make(rng)
        if is_test_question(p.question) != want_test or p.question in seen:
            continue
        if want_test:
            seen.add(p.question)
        yield p


def take(stream: Iterator[P], n: int) -> list[P]:
    return list(itertools.islice(stream, n))
