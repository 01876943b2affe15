import os

import pytest

from recdiff.benchmarks import get_benchmark
from recdiff.benchmarks.gsm8k import flexible_extract, is_match, render_plain, strict_extract
from recdiff.errors import RecdiffError


@pytest.mark.parametrize("text, expected", [
    ("So she pays $1,250.00.", "$1,250.00."),          # one [$0-9.,]{2,} run, trailing "." kept by the regex
    ("The answer is 18.", "18."),
    ("3 apples and 4 pears", "4"),                       # last match; single digits via the 2nd group
    ("It costs -5 dollars", "-5"),
    ("Wait...", "..."),                                  # lm-eval quirk: punctuation runs are "numbers"
    ("no digits here", None),
    ("12 then 3.5 then 7", "7"),
])
def test_flexible_extract_reproduces_lm_eval(text, expected):
    assert flexible_extract(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("The answer is 42.", "42"),
    ("The answer is 18", "1"),             # final "." of the pattern is a wildcard: eats the last digit
    ("The answer is 7.\nThe answer is 8.", "7"),  # first match
    ("the answer is 5.", None),            # case-sensitive
    ("The answer is $5.", None),           # "$" not allowed by strict-match
    ("The answer is 1,250.00.", "1,250.00"),
])
def test_strict_extract_reproduces_lm_eval(text, expected):
    assert strict_extract(text) == expected


@pytest.mark.parametrize("extracted, reference, ok", [
    ("$1,250.00.", "1250", False),     # -> "1250.00" after ignoring ",", "$", trailing "."
    ("$1,250.", "1250", True),
    ("1250.00", "1250.00", True),
    ("18.", "18", True),
    ("-5", "-5", True),
    ("5..", "5", False),               # only one trailing "." is ignored
    (None, "5", False),
])
def test_exact_match_semantics(extracted, reference, ok):
    assert is_match(extracted, reference) is ok


def test_flexible_and_strict_differ():
    bench = get_benchmark("gsm8k", path="unused")
    p = bench._problem({"question": "q", "answer": "steps\n#### 1,000"}, 0)
    assert p.reference == "1000"
    s1, s2, s3 = bench.score_all([p] * 3, ["So 500 + 500 = 1000 in total.",
                                           "The answer is 1,000. Great, 1000 it is: 999",
                                           "The answer is 1000."])
    assert (s1.correct, s1.detail["strict_match"]) == (True, False)      # no "The answer is"
    assert (s2.correct, s2.detail["strict_match"]) == (False, True)      # last number is 999
    assert (s3.correct, s3.detail["strict_match"]) == (True, True)
    # greedy group, "." wildcard ate the space
    assert s2.extracted == "999" and s2.detail["strict_extracted"] == "1,000."


def test_plain_prompt_golden():
    assert render_plain("How many?", n_shot=2) == (
        "Q: There are 15 trees in the grove. Grove workers will plant trees in the grove today. After they are "
        "done, there will be 21 trees. How many trees did the grove workers plant today?\nA: There are 15 trees "
        "originally. Then there were 21 trees after some more were planted. So there must have been 21 - 15 = 6. "
        "The answer is 6.\n\n"
        "Q: If there are 3 cars in the parking lot and 2 more cars arrive, how many cars are in the parking lot?\n"
        "A: There are originally 3 cars. 2 more cars arrive. 3 + 2 = 5. The answer is 5.\n\n"
        "Q: How many?\nA:")
    full = render_plain("How many?")
    assert full.count("Q: ") == 9 and full.count("The answer is") == 8
    assert full.endswith("The answer is 8.\n\nQ: How many?\nA:")


def test_chat_prompt_golden(chat_tokenizer, write_jsonl):
    path = write_jsonl("g.jsonl", [{"question": "What is 2+2?", "answer": "2+2=4\n#### 4"}])
    bench = get_benchmark("gsm8k", path=str(path), n_shot=1)
    (p,) = bench.problems()
    assert bench.render(p, chat_tokenizer) == (
        "<|system|>You are a helpful assistant that can assist users with mathematical reasoning.<|end|>"
        "<|user|>Q: There are 15 trees in the grove. Grove workers will plant trees in the grove today. After "
        "they are done, there will be 21 trees. How many trees did the grove workers plant today?\nA:<|end|>"
        "<|assistant|>There are 15 trees originally. Then there were 21 trees after some more were planted. So "
        "there must have been 21 - 15 = 6. The answer is 6.<|end|>"
        "<|user|>Q: What is 2+2?\nA:<|end|><|assistant|>")
    assert bench.render(p, None) == render_plain("What is 2+2?", 1)
    assert get_benchmark("gsm8k", path=str(path), n_shot=1, use_chat=False).render(p, chat_tokenizer) == \
        render_plain("What is 2+2?", 1)
    assert "Q:" in bench.stop_strings


def test_loader_hub_schema_and_slices(write_jsonl):
    rows = [{"question": f"Q{i}?", "answer": f"work\n#### {i * 1000:,}"} for i in range(20)]
    path = write_jsonl("gsm8k.jsonl", rows)
    b = get_benchmark("gsm8k", path=str(path), offset=2, limit=3)
    ps = b.problems()
    assert [p.question for p in ps] == ["Q2?", "Q3?", "Q4?"]
    assert [p.reference for p in ps] == ["2000", "3000", "4000"]
    assert b.selection["ids"] == [p.id for p in ps] and b.selection["n_total"] == 20
    a = get_benchmark("gsm8k", path=str(path), subsample=5, seed=7).problems()
    again = get_benchmark("gsm8k", path=str(path), subsample=5, seed=7).problems()
    other = get_benchmark("gsm8k", path=str(path), subsample=5, seed=8).problems()
    assert [p.id for p in a] == [p.id for p in again] and len(a) == 5
    assert [p.id for p in a] != [p.id for p in other]
    assert [p.id for p in a] == sorted((p.id for p in a), key=lambda s: int(s.rsplit("/", 1)[1]))


def test_data_dir_env(write_jsonl, monkeypatch):
    path = write_jsonl("gsm8k.jsonl", [{"question": "x", "answer": "#### 3"}])
    monkeypatch.setenv("RECDIFF_DATA_DIR", str(path.parent))
    assert get_benchmark("gsm8k").problems()[0].reference == "3"


def test_offline_error_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.delenv("RECDIFF_DATA_DIR", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf" / "datasets"))
    import recdiff.benchmarks.data as data

    monkeypatch.setattr(data, "hub_reachable", lambda timeout=2.0: False)
    for k in data._OFFLINE_ENV:  # restored after the test: load_hub sets them in this process
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(RecdiffError) as e:
        get_benchmark("gsm8k").problems()
    msg = str(e.value)
    # with the hub unreachable, datasets runs offline (it fails at once on a cache miss instead of retrying)
    assert all(os.environ.get(k) == "1" for k in data._OFFLINE_ENV)
    assert "\n" not in msg
    assert "openai/gsm8k" in msg and "RECDIFF_DATA_DIR" in msg and "path=" in msg


def test_bad_options():
    with pytest.raises(RecdiffError):
        get_benchmark("gsm8k", n_shot=9)
    with pytest.raises(RecdiffError):
        get_benchmark("gsm8k", limt=3)
    with pytest.raises(RecdiffError):
        get_benchmark("nope")
