"""The embedded arith benchmark: determinism, disjoint splits, correct solutions, GSM8K-style scoring."""

import re
from fractions import Fraction

import pytest

from recdiff.benchmarks import arith, get_benchmark


def test_generator_is_deterministic():
    a = arith.generate_split("test", 50, seed=7)
    b = arith.generate_split("test", 50, seed=7)
    assert [(p.question, p.solution) for p in a] == [(p.question, p.solution) for p in b]
    c = arith.generate_split("test", 50, seed=8)
    assert [p.question for p in a] != [p.question for p in c]


def test_splits_are_disjoint_and_test_is_distinct():
    test = arith.generate_split("test", 1000, seed=arith.DEFAULT_SEED)
    train = arith.generate_split("train", 20000, seed=0)
    tq = {p.question for p in test}
    assert len(tq) == 1000  # distinct
    assert not tq & {p.question for p in train}
    assert all(arith.is_test_question(q) for q in tq)
    assert not any(arith.is_test_question(p.question) for p in train)


def _eval_line(line: str) -> tuple[Fraction, int]:
    lhs, rhs = line.split("=")
    assert re.fullmatch(r"[0-9+\-*/()]+", lhs), line
    # exact rational arithmetic, independent of the generator: wrap every literal in Fraction
    val = eval(re.sub(r"(\d+)", r"Fraction(\1)", lhs), {"Fraction": Fraction})  # noqa: S307 - checked above
    return val, int(rhs)


@pytest.mark.parametrize("steps_per_line", [1, 2, 0])
def test_solutions_are_correct_and_in_gsm8k_format(steps_per_line):
    for p in arith.generate_split("test", 300, seed=3, steps_per_line=steps_per_line) + \
            arith.generate_split("train", 300, seed=3, steps_per_line=steps_per_line):
        *lines, last = p.solution.split("\n")
        assert last == f"#### {p.answer}"
        assert 2 <= p.n_ops <= 4
        n_sentences = len(p.steps) - 1
        assert len(lines) == (1 if steps_per_line == 0 else -(-n_sentences // steps_per_line))
        qnums = set(re.findall(r"\d+", p.question)) | {"2"}  # "twice"
        prev = None
        for line in lines:
            val, rhs = _eval_line(line)
            assert val == rhs, (p.question, line)
            assert 1 <= rhs <= arith.MAX_VALUE
            nums = re.findall(r"\d+", line.split("=")[0])
            if prev is not None:  # chained: each line starts from the previous result
                assert line.lstrip("(").startswith(str(prev)) and nums[0] == str(prev), p.solution
                nums = nums[1:]
            for n in nums:  # every other number of the expression is read from the question
                assert n in qnums, (p.question, line)
            prev = rhs
        assert prev == p.answer == arith.recompute_answer(p.steps)


def test_questions_do_not_depend_on_the_solution_layout():
    a = arith.generate_split("test", 100, seed=5, steps_per_line=1)
    b = arith.generate_split("test", 100, seed=5, steps_per_line=0)
    assert [p.question for p in a] == [p.question for p in b]
    assert [p.answer for p in a] == [p.answer for p in b]
    assert arith.write_solution([("start", 48), ("sub", 48, 28), ("times", 20, 3), ("groups", 60, 4, 5)], 0) \
        == "(48-28)*3+4*5=80\n#### 80"
    assert arith.write_solution([("start", 48), ("sub", 48, 28), ("times", 20, 3), ("groups", 60, 4, 5)], 2) \
        == "(48-28)*3=60\n60+4*5=80\n#### 80"


def test_benchmark_registry_slice_render_and_score():
    bench = get_benchmark("arith", split="test", limit=5, offset=2, seed=1234)
    probs = bench.problems()
    assert len(probs) == 5 and probs[0].id == "arith-test-1234-2"
    full = arith.generate_split("test", 7, seed=1234)
    assert probs[0].question == full[2].question and probs[0].reference == str(full[2].answer)
    assert bench.render(probs[0], None) == f"Q: {probs[0].question}\nA:"
    good = " " + probs[0].meta["solution"]
    wrong = f" 1+1=2\n#### {int(probs[1].reference) + 1}"
    scores = bench.score_all(probs[:3], [good, wrong, "I do not know"])
    assert [s.correct for s in scores] == [True, False, False]
    assert scores[0].extracted == probs[0].reference
    assert scores[2].extracted is None


def test_unknown_split_is_rejected():
    from recdiff.errors import RecdiffError

    with pytest.raises(RecdiffError):
        get_benchmark("arith", split="validation")


def test_a_process_generates_a_split_once_and_each_benchmark_gets_its_own_rows():
    """Trials that a sweep process runs one after another share the generated split (arith._split_rows), each with
    rows of its own: what one trial's problems hold cannot change another's."""
    arith._split_rows.cache_clear()
    first, second = (get_benchmark("arith", n_problems=40, limit=3) for _ in range(2))
    a, b = first.problems(), second.problems()
    info = arith._split_rows.cache_info()
    assert (info.misses, info.hits) == (1, 1)
    assert [(p.question, p.meta) for p in a] == [(p.question, p.meta) for p in b]
    want = [(p.question, p.steps) for p in arith.generate_split("test", 3)]
    assert [(p.question, p.meta["steps"]) for p in a] == want      # the split itself, as generated
    a[0].meta["steps"].append(("junk",))
    assert get_benchmark("arith", n_problems=40, limit=3).problems()[0].meta["steps"] == want[0][1]
