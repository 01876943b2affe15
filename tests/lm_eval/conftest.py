"""Shared setup of the lm-eval tests (each module skips, saying so, without the extra "lm-eval"): offline, small
local task data."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

# lm-eval's tasks download from the Hugging Face hub, which CI cannot reach: every test reads local files
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[2]
# GSM8K-format prompts and answers: the arith-trained embedded model (block 256; the default compose model has 128)
ARITH_MODEL = REPO / "recdiff" / "assets" / "embedded_arith"

# GSM8K-format documents (question, answer ending in "#### N"), written for these tests
GSM8K_ROWS = [
    {"question": "Tina has 12 pens. She buys 3 packs of 4 pens each. How many pens does she have now?",
     "answer": "3 packs of 4 pens are 3*4=<<3*4=12>>12 pens.\n12+12=<<12+12=24>>24\n#### 24"},
    {"question": "A farm sold 1,200 eggs on Monday and 50 more on Tuesday. How many eggs did it sell?",
     "answer": "1,200+50=<<1200+50=1250>>1,250\n#### 1,250"},
    {"question": "Omar had $40. He spent $13.50 on lunch. How much money does he have left?",
     "answer": "40-13.50=<<40-13.5=26.5>>26.50\n#### 26.50"},
    {"question": "The temperature was 3 degrees and fell by 8 degrees. What is the temperature now?",
     "answer": "3-8=<<3-8=-5>>-5\n#### -5"},
    {"question": "Kim reads 18 pages a day. How many pages does she read in a week?",
     "answer": "18*7=<<18*7=126>>126\n#### 126"},
    {"question": "Ben splits 72 marbles equally among 8 friends. How many does each friend get?",
     "answer": "72/8=<<72/8=9>>9\n#### 9"},
    {"question": "A box holds 6 rows of 5 cookies. Leo eats 7. How many cookies are left?",
     "answer": "6*5=<<6*5=30>>30\n30-7=<<30-7=23>>23\n#### 23"},
    {"question": "Eva walks 2 miles each morning and 3 each evening. How far does she walk in 10 days?",
     "answer": "(2+3)*10=<<(2+3)*10=50>>50\n#### 50"},
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def gsm8k_file(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "gsm8k.jsonl", GSM8K_ROWS)


@pytest.fixture(scope="session")
def chat_tokenizer():
    """A real transformers tokenizer (no download) with a small, known chat template (as tests/benchmarks has)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")))
    tok.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
                         "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    return tok
