"""What every sampler shares: parameter validation, token selection, stop conditions, the result type."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from recdiff.errors import RecdiffError
from recdiff.model import RecurrentDepthModel


@dataclass
class GenerationResult:
    tokens: list[int]  # new tokens only
    stats: dict[str, Any]
    trace: Any = None  # recdiff.trace.DiffusionTrace for the diffusion sampler with trace=True
    stopped_by: str = "length"  # "length" | "stop_token" | "stop_string" | "max_steps"
    # seconds from the sequence's admission to its last step, set by the scheduler (in a batch the device is shared
    # with the other sequences); not part of the result's identity: equal results may take different times
    time_s: float | None = field(default=None, compare=False)


# --------------------------------------------------------------------------------------------- parameters
Check = Callable[[Any], str | None]  # returns a complaint or None


# The most recurrences a sampler accepts per token (Huginn-0125 was trained around 32 and evaluated up to 64-128):
# beyond it a call is far more likely a typo than an experiment, and it would run for hours without a word.
MAX_RECURRENCE = 1024


def positive_int(v: Any) -> str | None:
    return None if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else "must be an integer >= 1"


def recurrence(v: Any) -> str | None:
    """A recurrence count: an integer in [1, MAX_RECURRENCE]."""
    ok = isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_RECURRENCE
    return None if ok else f"must be an integer in [1, {MAX_RECURRENCE}]"


def non_negative_int(v: Any) -> str | None:
    return None if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else "must be an integer >= 0"


def unit_interval(v: Any) -> str | None:
    return None if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1 else "must be in [0, 1]"


def half_open_unit(v: Any) -> str | None:
    return None if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1 else "must be in [0, 1)"


def non_negative(v: Any) -> str | None:
    return None if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else "must be a number >= 0"


def positive(v: Any) -> str | None:
    return None if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else "must be a number > 0"


def boolean(v: Any) -> str | None:
    return None if isinstance(v, bool) else "must be true or false"


def one_of(*choices: str) -> Check:
    def check(v: Any) -> str | None:
        return None if v in choices else f"must be one of {', '.join(choices)}"

    return check


def optional(check: Check) -> Check:
    """``check``, with None allowed (the sampler then picks its own value)."""

    def checked(v: Any) -> str | None:
        complaint = None if v is None else check(v)
        return complaint and complaint.replace("must be", "must be null or", 1)

    return checked


Rule = Callable[[dict[str, Any]], str | None]  # a combination of validated values → a complaint or None


def at_most(name: str, bound: str) -> Rule:
    """``name`` may not exceed ``bound`` (both parameters; a None value is not checked)."""

    def rule(p: dict[str, Any]) -> str | None:
        a, b = p.get(name), p.get(bound)
        return f"{name}={a} exceeds {bound}={b}" if a is not None and b is not None and a > b else None

    return rule


def validate(sampler: str, params: dict[str, Any], spec: dict[str, tuple[Any, Check]],
             rules: Sequence[Rule] = ()) -> dict[str, Any]:
    """Fill defaults from ``spec`` (name → (default, check)), reject unknown names, bad values and bad combinations
    (``rules``) in one line. The API and the sweep both call this, so they accept exactly the same settings."""
    for name in params:
        if name not in spec:
            close = difflib.get_close_matches(name, spec, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(sorted(spec))})"
            raise RecdiffError(f"unknown parameter {name!r} for sampler {sampler!r}{hint}")
    out = {name: params.get(name, default) for name, (default, _) in spec.items()}
    for name, (_, check) in spec.items():
        complaint = check(out[name])
        if complaint:
            raise RecdiffError(f"{sampler} sampler: {name}={out[name]!r} {complaint}")
    for rule in rules:
        complaint = rule(out)
        if complaint:
            raise RecdiffError(f"{sampler} sampler: {complaint}")
    return out


# --------------------------------------------------------------------------------------------- selection
class Selector:
    """Greedy (temperature 0) or seeded temperature / top-p sampling over rows of logits; each sequence draws from
    its own generator, so its tokens do not depend on what else is in the batch."""

    def __init__(self, temperature: float, top_p: float) -> None:
        if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not temperature >= 0:
            raise RecdiffError(f"temperature={temperature!r} must be a number >= 0 (0 = greedy)")
        if not isinstance(top_p, (int, float)) or isinstance(top_p, bool) or not 0 < top_p <= 1:
            raise RecdiffError(f"top_p={top_p!r} must be in (0, 1]")
        self.temperature, self.top_p = float(temperature), float(top_p)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def __call__(self, logits: Tensor, generator: torch.Generator) -> Tensor:
        """``(N, V)`` float logits → ``(N,)`` token ids."""
        if self.temperature == 0:
            return logits.argmax(dim=-1)
        probs = torch.softmax(logits.float() / self.temperature, dim=-1)
        if self.top_p < 1:
            sorted_p, idx = probs.sort(dim=-1, descending=True)
            # keep the smallest prefix whose mass reaches top_p (always at least the top token)
            drop = (sorted_p.cumsum(-1) - sorted_p) >= self.top_p
            sorted_p = sorted_p.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p)
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)

    def rows(self, logits: Tensor, generators: list[torch.Generator | None]) -> Tensor:
        """One selection per row of ``(B, V)`` logits; rows whose generator is None are skipped (greedy: all)."""
        if self.greedy:
            return logits.argmax(dim=-1)
        out = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
        for b, g in enumerate(generators):
            if g is not None:
                out[b] = self(logits[b : b + 1], g)[0]
        return out


# --------------------------------------------------------------------------------------------- stopping
class StopCondition:
    """Stop token ids, and stop strings checked on the decoded tail (needs the model's tokenizer)."""

    def __init__(self, stop_token_ids: Sequence[int] | None, stop_strings: Sequence[str] | None, tokenizer: Any) -> None:
        self.ids = set(int(i) for i in (stop_token_ids or ()))
        self.strings = [s for s in (stop_strings or ()) if s]
        if self.strings and tokenizer is None:
            raise RecdiffError("stop_strings need a tokenizer; this model was loaded without one (use stop_token_ids)")
        self.tokenizer = tokenizer

    def first_stop(self, tokens: list[int], new_from: int) -> tuple[int, str] | None:
        """If tokens[new_from:] complete a stop, return (number of tokens to keep, reason)."""
        for i in range(new_from, len(tokens)):
            if tokens[i] in self.ids:
                return i + 1, "stop_token"
        if self.strings:
            # decoding everything is simple and, at benchmark lengths, cheap next to a forward pass
            text = self.tokenizer.decode(tokens)
            if any(s in text for s in self.strings):
                for n in range(max(new_from, 1), len(tokens) + 1):
                    if any(s in self.tokenizer.decode(tokens[:n]) for s in self.strings):
                        return n, "stop_string"
        return None


def default_stop_ids(model: RecurrentDepthModel, stop_token_ids: Sequence[int] | None) -> list[int] | None:
    """Explicit ids win; else the config's eos ids; else the tokenizer's eos id."""
    if stop_token_ids is not None:
        return list(stop_token_ids)
    eos = model.config.eos_token_id
    if eos is not None:
        return [eos] if isinstance(eos, int) else list(eos)
    tok = model.tokenizer
    if tok is not None and getattr(tok, "eos_token_id", None) is not None:
        return [tok.eos_token_id]
    return None


@dataclass
class Options:
    """What every sequence of one ``generate`` call shares."""

    model: RecurrentDepthModel
    select: Selector
    stop: StopCondition
    slots: int  # sequences decoded side by side (continuous batching)
    longest: int  # the most positions any sequence may need (prompt + max_new_tokens), sizes the KV cache


def check_fits(model: RecurrentDepthModel, prompt_len: int, total: int, index: int | None = None) -> None:
    block = model.config.block_size
    if total > block:
        which = "prompt" if index is None else f"prompt {index}"
        raise RecdiffError(
            f"{which} of {prompt_len} tokens + up to {total - prompt_len} more positions exceeds the model's "
            f"block_size {block}; shorten the prompt or lower max_new_tokens"
        )
