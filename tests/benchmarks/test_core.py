
import math

import pytest

from recdiff.benchmarks import Benchmark, Problem, get_benchmark, register, select_indices
from recdiff.benchmarks.stats import wilson_interval


def wilson_by_hand(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson's score interval written out (no continuity correction): the formula the trials recorded before scipy's
    implementation replaced the hand-written one in recdiff/benchmarks/stats.py."""
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half) if k else 0.0), (min(1.0, centre + half) if k < n else 1.0)


def test_wilson_against_hand_computed():
    # p=0.5, n=10: centre 0.5, half = 1.96*sqrt(0.025 + 0.009604)/1.38416 = 0.26341
    lo, hi = wilson_interval(5, 10)
    assert lo == pytest.approx(0.23659, abs=1e-4) and hi == pytest.approx(0.76341, abs=1e-4)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(0, 10)[1] == pytest.approx(0.27754, abs=1e-4)
    assert wilson_interval(10, 10)[1] == 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


@pytest.mark.parametrize(("k", "n"), [(0, 1), (0, 4), (2, 4), (4, 4), (5, 10), (7, 20), (56, 70), (1, 200), (199, 200)])
def test_the_recorded_wilson_bounds_are_those_recorded_before(k, n):
    """scipy's interval at z = 1.96 is the hand-written formula's to the last bits: recorded bounds do not move."""
    assert wilson_interval(k, n) == pytest.approx(wilson_by_hand(k, n), abs=1e-12)


def test_select_indices():
    assert select_indices(10, limit=3, offset=2) == [2, 3, 4]
    s = select_indices(100, subsample=10, seed=3)
    assert s == sorted(s) and len(set(s)) == 10 and s == select_indices(100, subsample=10, seed=3)
    assert select_indices(100, subsample=10, seed=3, offset=8, limit=5) == s[8:]
    assert select_indices(5, subsample=50) == list(range(5))


def test_register_one_liner():
    @register("toy")
    class Toy(Benchmark):
        def _rows(self):
            return [{"q": "a"}, {"q": "b"}], "inline"

        def _problem(self, row, index):
            return Problem(id=str(index), question=row["q"], reference="", meta={})

    b = get_benchmark("toy", limit=1)
    assert b.name == "toy" and [p.question for p in b.problems()] == ["a"]


def test_arith_is_lazy_registered():
    b = get_benchmark("arith", limit=2)
    assert len(b.problems()) == 2


@pytest.mark.parametrize("name, fields", [
    ("gsm8k", "question, answer"), ("math500", "problem, answer"), ("mbpp", "task_id, text, code, test_list"),
    ("humaneval", "task_id, prompt, canonical_solution, test, entry_point"),
    ("minerva_math", "problem, solution, type"),
])
def test_local_file_messages_name_the_expected_fields(write_jsonl, name, fields):
    from recdiff.errors import RecdiffError

    wrong = write_jsonl("wrong.jsonl", [{"q": "1+1?", "a": "2"}])
    first = fields.split(", ")[0]
    with pytest.raises(RecdiffError, match=rf"^{wrong}: row 1 has no field '{first}' \(expected fields: {fields}; "
                                           r"found: q, a\)$"):
        get_benchmark(name, path=str(wrong)).problems()
    empty = write_jsonl("empty.jsonl", [])
    with pytest.raises(RecdiffError, match=rf"^{empty} is empty; expected rows with fields {fields}$"):
        get_benchmark(name, path=str(empty)).problems()
