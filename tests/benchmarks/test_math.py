import pytest

from recdiff.benchmarks import get_benchmark
from recdiff.benchmarks.minerva_math import EXEMPLARS, last_boxed, render_plain

MATH500_ROWS = [  # the hub's schema
    {"problem": "Compute 3/4.", "solution": "...", "answer": "\\frac{3}{4}", "subject": "Algebra", "level": 1,
     "unique_id": "test/algebra/1.json"},
    {"problem": "Domain?", "solution": "...", "answer": "[2,5)", "subject": "Algebra", "level": 2,
     "unique_id": "test/algebra/2.json"},
    {"problem": "Roots?", "solution": "...", "answer": "\\{1,2,3\\}", "subject": "Algebra", "level": 2,
     "unique_id": "test/algebra/3.json"},
    {"problem": "Side?", "solution": "...", "answer": "2\\sqrt{2}", "subject": "Geometry", "level": 3,
     "unique_id": "test/geometry/4.json"},
]


def test_math500_math_verify_cases(write_jsonl):
    bench = get_benchmark("math500", path=str(write_jsonl("m.jsonl", MATH500_ROWS)))
    ps = bench.problems()
    assert [p.id for p in ps] == [r["unique_id"] for r in MATH500_ROWS]
    cases = [
        (0, "So the result is $\\boxed{0.75}$.", True),           # \frac{3}{4} vs 0.75
        (0, "So the result is $\\boxed{0.7}$.", False),
        (1, "The domain is $\\boxed{[2, 5)}$.", True),            # interval
        (1, "The domain is $\\boxed{(2, 5)}$.", False),           # open vs half-open
        (2, "The roots are $\\boxed{\\{3, 2, 1\\}}$.", True),     # set, any order
        (2, "The roots are $\\boxed{\\{1, 2\\}}$.", False),
        (3, "The side is $\\boxed{2\\sqrt{2}}$.", True),
        (3, "The side is $\\boxed{2}$.", False),  # unwrapped, the bare gold "2\sqrt{2}" would parse as 2
        (3, "I do not know.", False),
    ]
    scores = bench.score_all([ps[i] for i, _, _ in cases], [c for _, c, _ in cases])
    assert [s.correct for s in scores] == [ok for _, _, ok in cases]
    assert scores[0].extracted == "0.75"


def test_bare_gold_needs_wrapping():
    from math_verify import parse

    assert str(parse("2\\sqrt{2}")[0]) == "2"          # the mis-parse the wrapping avoids
    assert str(parse("$2\\sqrt{2}$")[0]) == "2*sqrt(2)"


def test_math500_prompt_golden(chat_tokenizer, write_jsonl):
    bench = get_benchmark("math500", path=str(write_jsonl("m.jsonl", MATH500_ROWS[:1])))
    (p,) = bench.problems()
    user = "Compute 3/4.\nPlease reason step by step, and put your final answer within \\boxed{}."
    assert bench.render(p, chat_tokenizer) == f"<|user|>{user}<|end|><|assistant|>"
    assert bench.render(p, None) == user + "\n"


HENDRYCKS_ROWS = [  # EleutherAI/hendrycks_math schema; one file for all subjects
    {"problem": "What is $1+1$?", "level": "Level 1", "type": "Algebra", "solution": "It is $\\boxed{2}$."},
    {"problem": "Count.", "level": "Level 2", "type": "Counting & Probability",
     "solution": "There are $\\boxed{\\frac{1}{2}}$ ways... no, $\\boxed{\\dfrac{5}{6}}$."},
    {"problem": "Mod?", "level": "Level 3", "type": "Number Theory", "solution": "So $\\boxed{x \\in \\{1,2\\}}$."},
    {"problem": "Sum?", "level": "Level 1", "type": "Algebra", "solution": "So $\\boxed{10}$."},
]


@pytest.mark.slow
def test_minerva_loader_subjects_and_scoring(write_jsonl):
    path = str(write_jsonl("minerva.jsonl", HENDRYCKS_ROWS))
    bench = get_benchmark("minerva_math", path=path)
    ps = bench.problems()
    assert [p.id for p in ps] == ["minerva_math/algebra/0", "minerva_math/counting_and_probability/0",
                                  "minerva_math/number_theory/0", "minerva_math/algebra/1"]
    assert [p.reference for p in ps] == ["2", "\\dfrac{5}{6}", "x \\in \\{1,2\\}", "10"]
    only = get_benchmark("minerva_math", path=path, subjects=["algebra"]).problems()
    assert [p.question for p in only] == ["What is $1+1$?", "Sum?"]
    completions = ["We get 2.\nFinal Answer: The final answer is $2$. I hope it is correct.",
                   "Final Answer: The final answer is $\\frac{10}{12}$. I hope it is correct.",
                   "Final Answer: The final answer is $3$. I hope it is correct.",
                   "The sum is $\\boxed{10}$."]
    assert [s.correct for s in bench.score_all(ps, completions)] == [True, True, False, True]


def test_last_boxed():
    assert last_boxed("a $\\boxed{1}$ b $\\boxed{\\frac{1}{2}}$") == "\\frac{1}{2}"
    assert last_boxed("\\boxed 5$ done") == "5"
    assert last_boxed("no box") is None
    assert [last_boxed(s) for _, s in EXEMPLARS] == ["[2,5)", "24", "16", "-\\frac{2}{3}"]


def test_minerva_prompt_golden(chat_tokenizer):
    assert render_plain("What is $1+1$?", n_shot=1) == (
        "Problem:\nFind the domain of the expression  $\\frac{\\sqrt{x-2}}{\\sqrt{5-x}}$.}\n\nSolution: The "
        "expressions inside each square root must be non-negative. Therefore, $x-2 \\ge 0$, so $x\\ge2$, and "
        "$5 - x \\ge 0$, so $x \\le 5$. Also, the denominator cannot be equal to zero, so $5-x>0$, which gives "
        "$x<5$. Therefore, the domain of the expression is $\\boxed{[2,5)}$.\nFinal Answer: The final answer is "
        "$[2,5)$. I hope it is correct.\n\nProblem:\nWhat is $1+1$?\n\nSolution:")
    four = render_plain("Q")
    assert four.count("Problem:\n") == 5 and four.count("I hope it is correct.") == 4
    from recdiff.benchmarks.minerva_math import MinervaMath

    assert "Problem:" in MinervaMath.stop_strings
