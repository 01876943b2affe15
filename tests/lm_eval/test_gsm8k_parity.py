"""The hand-written GSM8K benchmark against lm-eval's own ``gsm8k_cot`` task on the same local GSM8K-format data
(``benchmark=gsm8k`` vs ``benchmark=lm_eval benchmark.task=gsm8k_cot``): the same prompts, few-shot and chat ones
included, and the same scores for the same completions, lm-eval's quirks included. The one documented difference:
the hand-written task also stops at Huginn's end-of-turn token."""

from __future__ import annotations

import pytest

pytest.importorskip("lm_eval", reason='lm-eval is not installed: pip install -e ".[lm-eval]"')

from recdiff.benchmarks import get_benchmark
from recdiff.benchmarks.gsm8k import SYSTEM_PROMPT
from tests.lm_eval.conftest import GSM8K_ROWS

pytestmark = pytest.mark.slow

# one completion per document of GSM8K_ROWS, each at one of lm-eval's scoring quirks
COMPLETIONS = [
    " 3*4=12 pens. 12+12=24. The answer is 24.",       # both filters right
    " 1,200+50=1,250. The answer is 1,250.",            # "," ignored on both sides
    " He has 26.5 dollars left.",                      # 26.5 is not "26.50": exact string match
    " It is -5 degrees. The answer is -5",              # strict: the pattern's final "." needs a character: no match
    " 18*7=126 pages, The answer is 126, in a week 7",  # flexible takes the last number: 7; strict "126," -> 126
    " Each gets 9. The answer is 8.",                   # flexible 8, strict 8: both wrong
    " I do not know.",                                  # no number: [invalid] / None
    " Wait... 50 miles",                                # flexible "50", strict invalid
]


def lm_eval_bench(path, **options):
    return get_benchmark("lm_eval", task="gsm8k_cot", path=str(path), **options)


@pytest.mark.parametrize("n_shot", [0, 3, 8])
def test_the_same_prompts(gsm8k_file, n_shot):
    mine = get_benchmark("gsm8k", path=str(gsm8k_file), n_shot=n_shot, use_chat=False)
    theirs = lm_eval_bench(gsm8k_file, n_shot=n_shot)
    a, b = mine.problems(), theirs.problems()
    assert len(a) == len(b) == len(GSM8K_ROWS)
    for p, q in zip(a, b):
        assert mine.render(p) == theirs.render(q)
        assert p.reference == q.reference.replace(",", "")   # lm-eval keeps "1,250"; both scorers ignore ","
    assert theirs.render(b[0]).count("Q: ") == n_shot + 1


def test_the_same_chat_prompts(gsm8k_file, chat_tokenizer):
    # the paper's chat format = lm-eval --apply_chat_template --fewshot_as_multiturn --system_instruction <prompt>
    mine = get_benchmark("gsm8k", path=str(gsm8k_file), n_shot=3, use_chat=True)
    theirs = lm_eval_bench(gsm8k_file, n_shot=3, use_chat=True, system_instruction=SYSTEM_PROMPT)
    for p, q in zip(mine.problems(), theirs.problems()):
        chat = mine.render(p, chat_tokenizer)
        assert chat.startswith(f"<|system|>{SYSTEM_PROMPT}<|end|><|user|>Q: ")
        assert chat == theirs.render(q, chat_tokenizer)


def test_the_same_scores(gsm8k_file):
    mine = get_benchmark("gsm8k", path=str(gsm8k_file), n_shot=0)
    ours = mine.score_all(mine.problems(), COMPLETIONS)
    for filt, key in (("flexible-extract", "flexible_extract"), ("strict-match", "strict_match")):
        theirs = lm_eval_bench(gsm8k_file, n_shot=0, filter=filt)
        scores = theirs.score_all(theirs.problems(), COMPLETIONS)
        assert [s.detail[key] for s in ours] == [s.correct for s in scores], filt
        assert theirs.accuracy(scores) == sum(s.detail[key] for s in ours) / len(ours)
        if filt == "flexible-extract":   # the extracted answers too ([invalid] = None)
            assert [s.extracted for s in ours] == [None if s.extracted == "[invalid]" else s.extracted
                                                   for s in scores]
    # the quirks above, as lm-eval scores them
    assert [s.detail["flexible_extract"] for s in ours] == [True, True, False, True, False, False, False, True]
    assert [s.detail["strict_match"] for s in ours] == [True, True, False, False, True, False, False, False]


def test_stop_strings_differ_only_by_huginns_end_of_turn(gsm8k_file):
    mine = get_benchmark("gsm8k", path=str(gsm8k_file))
    theirs = lm_eval_bench(gsm8k_file)
    theirs.problems()
    assert set(mine.stop_strings) - set(theirs.stop_strings) == {"<|end_turn|>"}
    assert set(theirs.stop_strings) <= set(mine.stop_strings)
