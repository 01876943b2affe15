"""The `hops` task: answers checked by an independent resolver, causal statement order, disjoint splits, tokens."""

import random

import pytest

from recdiff.benchmarks import get_benchmark, hops
from recdiff.errors import RecdiffError
from recdiff.tokenizer import build_byte_tokenizer, byte_ids


def test_answers_follow_the_statements_and_every_link_points_back():
    rng = random.Random(3)
    for k in range(1, hops.MAX_HOPS + 1):
        for _ in range(20):
            p = hops.make_problem(rng, hops=k)
            body, asked = p.question.split(";?")
            values = hops.resolve(p.question)
            assert "".join(str(values[n]) for n in asked.split(",")) == p.answer
            assert p.solution == ",".join(f"{n}={values[n]}" for n in asked.split(",")) + f"\n#### {p.answer}"
            defined: set[str] = set()
            for statement in body.split(";"):
                name, source = statement.split("=")
                assert name not in defined and (source.isdigit() or source in defined)
                defined.add(name)
            # K = links from the main chain's digit to its last variable, which is always asked
            assert max(p.asked_hops) == k == p.hops
            assert len(asked.split(",")) == hops.N_ASKED == len(set(asked.split(",")))


def test_hop_counts_are_the_links_followed():
    assert hops.resolve("x=4;d=x;q=d;?q") == {"x": 4, "d": 4, "q": 4}
    rng = random.Random(0)
    p = hops.make_problem(rng, hops=5)
    body = dict(s.split("=") for s in p.question.split(";?")[0].split(";"))
    for name, depth in zip(p.question.split("?")[1].split(","), p.asked_hops):
        links = 0
        while not body[name].isdigit():
            name, links = body[name], links + 1
        assert links == depth


def test_splits_are_disjoint_and_k_uniform_on_the_test_split():
    test = hops.generate_split("test", 2000)
    train = [next(it) for it in [hops.iter_split("train", 0)] for _ in range(400)]
    assert all(hops.is_test_question(p.question) for p in test)
    assert not any(hops.is_test_question(p.question) for p in train)
    assert len({p.question for p in test}) == 2000
    counts = [sum(p.hops == k for p in test) for k in range(1, hops.MAX_HOPS + 1)]
    assert min(counts) > 80  # every K is represented (expected 125 each)


def test_byte_tokenizer_one_token_per_character_and_hf_round_trip(tmp_path):
    from recdiff.tokenizer import load_hf_tokenizer, save_tokenizer

    p = hops.make_problem(random.Random(1), hops=7)
    text = hops.prompt_text(p.question) + hops.completion_text(p.solution)
    tok = build_byte_tokenizer()
    assert tok.encode(text).ids == byte_ids(text) and len(byte_ids(text)) == len(text)
    save_tokenizer(tok, tmp_path, model_max_length=256)
    hf = load_hf_tokenizer(tmp_path)
    assert hf(text)["input_ids"] == byte_ids(text)
    assert hf.decode(byte_ids(text)) == text


def test_benchmark_scores_all_four_digits():
    bench = get_benchmark("hops", limit=3)
    problems = bench.problems()
    right = [" " + p.meta["solution"] + "\n\n" for p in problems]
    wrong = [r.replace("#### " + p.reference, "#### " + p.reference[:-1] + str((int(p.reference[-1]) % 9) + 1))
             for r, p in zip(right, problems)]
    assert [s.correct for s in bench.score_all(problems, right)] == [True] * 3
    assert [s.correct for s in bench.score_all(problems, wrong)] == [False] * 3
    with pytest.raises(RecdiffError, match="max_hops"):
        get_benchmark("hops", max_hops=40)
