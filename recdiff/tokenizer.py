"""Small byte-level BPE tokenizer for the embedded model, built with the ``tokenizers`` library.

Digits are always single tokens (``Digits(individual_digits=True)`` before the byte-level split), so the model
sees numbers digit by digit, while the template words of the ``arith`` benchmark become single tokens.
Saved as ``tokenizer.json`` + ``tokenizer_config.json`` + ``special_tokens_map.json`` so that
``transformers.PreTrainedTokenizerFast`` / ``AutoTokenizer`` loads it offline.  No BOS is added on
encoding (no post-processor), so ``tokenizer(text)`` and ``tokenizer.encode(text)`` give the same ids as
training regardless of ``add_special_tokens``.

Also how a sweep encodes a prompt (:func:`encode_prompt`), and :class:`ByteCodec`, UTF-8 bytes as token ids for
checkpoints without a tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

PAD_TOKEN = "<|pad|>"
EOS_TOKEN = "<|end_of_text|>"
BOS_TOKEN = "<|begin_of_text|>"
UNK_TOKEN = "<|unk|>"
SPECIAL_TOKENS = [PAD_TOKEN, EOS_TOKEN, BOS_TOKEN, UNK_TOKEN]


def build_tokenizer(texts: Iterable[str], vocab_size: int = 384) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True),
         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def save_tokenizer(tok: Tokenizer, folder: str | Path, model_max_length: int) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "unk_token": UNK_TOKEN,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(model_max_length),
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    special = {"bos_token": BOS_TOKEN, "eos_token": EOS_TOKEN, "pad_token": PAD_TOKEN, "unk_token": UNK_TOKEN}
    (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")


def load_hf_tokenizer(folder: str | Path):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(folder))


def build_byte_tokenizer() -> Tokenizer:
    """Byte-level tokenizer without merges: the special tokens, then byte b as id ``len(SPECIAL_TOKENS) + b``.

    Every character of an ASCII text is one token, so a task whose names and digits are single characters (the
    ``compose`` benchmark) never sees a name merged with its neighbours, and ids can be computed without it
    (:func:`byte_ids`)."""
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = _bytes_to_unicode()
    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    vocab.update({alphabet[b]: len(SPECIAL_TOKENS) + b for b in range(256)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL_TOKENS)
    return tok


def byte_ids(text: str) -> list[int]:
    """What :func:`build_byte_tokenizer` encodes ``text`` to."""
    return [len(SPECIAL_TOKENS) + b for b in text.encode("utf-8")]


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte → printable character map (what the ByteLevel pre-tokenizer emits)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


# ---- prompt encoding (sweeps, lm-eval) -----------------------------------------------------------------------
class ByteCodec:
    """Prompt encoding for checkpoints without a tokenizer, opted into with ``model.tokenizer=bytes`` (the test
    fixture; see :func:`recdiff.trial.workload.check_tokenizer`): UTF-8 bytes as token ids."""

    eos_token_id = None

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """Token ids of a prompt: the tokenizer's special tokens (BOS) unless the text starts with BOS already (a chat
    template wrote it); UTF-8 bytes with :class:`ByteCodec`."""
    if isinstance(tokenizer, ByteCodec):
        return tokenizer.encode(text)
    bos = getattr(tokenizer, "bos_token", None)
    # a chat template already wrote the BOS token; do not add a second one
    special = not (bos and text.startswith(bos))
    return list(tokenizer.encode(text, add_special_tokens=special))
