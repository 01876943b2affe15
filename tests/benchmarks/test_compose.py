"""The `compose` task: answers checked by an independent solver, disjoint splits, scoring, formats, definition file."""

import json
import random
from collections import Counter

import numpy as np
import pytest

from recdiff.benchmarks import compose, get_benchmark
from recdiff.errors import RecdiffError
from recdiff.tokenizer import build_byte_tokenizer


def solve(question: str, perms: dict) -> int:
    """Independent solver: compose the functions' tables first (right to left as matrices of a permutation
    group), then read the start digit's row — no per-digit walk as the generator does."""
    start, letters = int(question[0]), question[1:]
    onehot = {c: np.eye(10, dtype=int)[list(p)] for c, p in perms.items()}  # row x has its 1 at p(x)
    m = np.eye(10, dtype=int)
    for c in letters:
        m = m @ onehot[c]
    return int(np.argmax(m[start]))


def test_permutations_are_eight_fixed_derangements():
    perms = compose.PERMUTATIONS
    assert sorted(perms) == list("abcdefgh")
    for p in perms.values():
        assert sorted(p) == list(range(10))
        assert all(p[d] != d for d in range(10))
    assert len({tuple(p) for p in perms.values()}) == 8
    assert compose.draw_permutations(compose.PERMUTATION_SEED) == perms   # drawn from a fixed seed
    assert compose.draw_permutations(1) != perms


def test_answers_match_an_independent_solver():
    rng = random.Random(5)
    for k in range(1, compose.MAX_K + 1):
        for _ in range(20):
            p = compose.make_problem(rng, k=k)
            assert p.k == k and len(p.question) == k + 1
            assert p.answer == solve(p.question, compose.PERMUTATIONS)
    # a hand-computed case: a then its inverse returns the start digit
    a = compose.PERMUTATIONS["a"]
    inv = {a[x]: x for x in range(10)}
    assert compose.apply(7, "a", compose.PERMUTATIONS) == a[7]
    assert inv[compose.apply(7, "a")] == 7


def test_splits_are_deterministic_disjoint_and_span_k():
    test = compose.generate_split("test", 600)
    assert [p.question for p in test] == [p.question for p in compose.generate_split("test", 600)]
    assert len({p.question for p in test}) == 600
    assert all(compose.is_test_question(p.question) for p in test)
    train = compose.generate_split("train", 2000, seed=0)
    assert not any(compose.is_test_question(p.question) for p in train)
    ks = Counter(p.k for p in test)
    assert set(ks) == set(range(1, compose.MAX_K + 1))
    # K is drawn uniformly, then repeats are dropped: K=1 has only the few test questions that exist
    k1 = [f"{d}{c}" for d in range(10) for c in compose.LETTERS if compose.is_test_question(f"{d}{c}")]
    assert ks[1] <= len(k1) < 20
    rest = [ks[k] for k in range(2, compose.MAX_K + 1)]
    assert max(rest) < 3 * min(rest)                   # about uniform in 2..24 (25 expected each)


def test_benchmark_slice_meta_and_scoring():
    bench = get_benchmark("compose", limit=50)
    problems = bench.problems()
    assert len(problems) == 50 and all(1 <= p.meta["k"] <= 24 for p in problems)
    assert bench.selection["n_total"] == compose.DEFAULT_N_PROBLEMS
    p = problems[0]
    assert bench.render(p) == f"Q: {p.question}"
    assert p.reference == str(solve(p.question, compose.PERMUTATIONS))
    right, wrong = p.reference, str((int(p.reference) + 1) % 10)
    completions = [f"{right}\nThe value is {right}.\n#### {right}\n\n",     # the trained format
                   f"{wrong}\n#### {right}",                               # the answer line decides
                   f"{right}\n#### {wrong}",
                   f"{right}\nThe value is {right}.",                      # no answer line: invalid
                   f"#### {wrong}\n#### {right}"]                          # the last answer line
    scores = bench.score_all([p] * 5, completions)
    assert [s.correct for s in scores] == [True, True, False, False, True]
    assert scores[3].extracted is None and scores[1].extracted == right


@pytest.mark.parametrize("bad", [{"split": "dev"}, {"max_k": 0}, {"n_problems": "x"}, {"colour": 1}])
def test_bad_options_are_one_line_errors(bad):
    with pytest.raises(RecdiffError):
        get_benchmark("compose", **bad)


def test_formats_and_their_lengths_in_byte_tokens():
    tok = build_byte_tokenizer()
    test = compose.generate_split("test", 400)
    p = compose.parse_question("7cbag")
    v = p.answer
    assert compose.completion_text(p, "direct") == f"{v}\n#### {v}\n\n"
    assert compose.completion_text(p, "long") == f"{v}\nThe value is {v}.\n#### {v}\n\n"
    assert compose.completion_text(p, "restate") == f"7cbag = {v}\n#### {v}\n\n"
    assert len(tok.encode("Q: 7cbag").ids) == 8                                # one token per character
    mean = {f: sum(len(tok.encode(compose.completion_text(q, f)).ids) for q in test) / len(test)
            for f in compose.FORMATS}
    assert mean["direct"] == 10 and mean["long"] == 26
    assert mean["restate"] == pytest.approx(14 + sum(q.k for q in test) / len(test))
    with pytest.raises(RecdiffError, match="unknown format"):
        compose.completion_text(p, "verbose")


def test_checkpoint_definition_guards_against_drift(tmp_path):
    bench = get_benchmark("compose", limit=1)
    bench.check_model(tmp_path)                                   # no definition: any model (e.g. Huginn)
    compose.write_definition(tmp_path, "long")
    d = json.loads((tmp_path / compose.DEFINITION_FILE).read_text())
    assert d["format"] == "long" and d["permutations"]["a"] == list(compose.PERMUTATIONS["a"])
    bench.check_model(tmp_path)
    d["permutations"]["a"] = d["permutations"]["b"]
    (tmp_path / compose.DEFINITION_FILE).write_text(json.dumps(d))
    with pytest.raises(RecdiffError, match="other permutations"):
        bench.check_model(tmp_path)


def test_training_stream_follows_the_level_and_stays_in_the_train_split():
    data = compose.TrainingData({"data_seed": 0, "data": {"format": "long", "max_k": 24}})
    draw = data.stream()
    low = [draw(0.0, 3) for _ in range(500)]
    assert {p.k for p in low} == {1, 2, 3}
    high = [draw(0.0, 99) for _ in range(500)]                    # capped at max_k
    assert max(p.k for p in high) == 24
    assert not any(compose.is_test_question(p.question) for p in low + high)
    prompt, completion = data.texts(low[0])
    assert prompt == f"Q: {low[0].question}" and completion.startswith(str(low[0].answer))
    with pytest.raises(RecdiffError, match="unknown format"):
        compose.TrainingData({"data_seed": 0, "data": {"format": "nope"}})
