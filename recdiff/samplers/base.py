"""What every sampler shares: token selection, stop conditions, the result type (parameters: recdiff/params.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from torch import Tensor

from recdiff.checks import temperature as temperature_check
from recdiff.checks import top_p as top_p_check
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


# --------------------------------------------------------------------------------------------- selection
class Selector:
    """Greedy (temperature 0) or seeded temperature / top-p sampling over rows of logits; each sequence draws from
    its own generator, so its tokens do not depend on what else is in the batch."""

    def __init__(self, temperature: float, top_p: float) -> None:
        for name, value, check in (("temperature", temperature, temperature_check), ("top_p", top_p, top_p_check)):
            complaint = check(value)
            if complaint:
                raise RecdiffError(f"{name}={value!r} {complaint}")
        self.temperature, self.top_p = float(temperature), float(top_p)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def __call__(self, logits: Tensor, generator: torch.Generator) -> Tensor:
        """``(N, V)`` float logits → ``(N,)`` token ids."""
        if self.temperature == 0:
            return logits.argmax(dim=-1)
        return torch.multinomial(self.probs(logits), 1, generator=generator).squeeze(-1)

    def probs(self, logits: Tensor) -> Tensor:
        """The distribution a sampled token is drawn from: ``(N, V)`` float logits → float32 probabilities at the
        temperature, cut to the top-p nucleus (not renormalised: a draw scales by the sum)."""
        probs = torch.softmax(logits.float() / self.temperature, dim=-1)
        if self.top_p < 1:
            sorted_p, idx = probs.sort(dim=-1, descending=True)
            # keep the smallest prefix whose mass reaches top_p (always at least the top token)
            drop = (sorted_p.cumsum(-1) - sorted_p) >= self.top_p
            sorted_p = sorted_p.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p)
        return probs

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

    def __init__(self, stop_token_ids: Sequence[int] | None, stop_strings: Sequence[str] | None,
                 tokenizer: Any) -> None:
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
