"""A model whose pieces are closed-form, so that a sampler's run can be computed by hand (litgpt's fake models with
fixed logits, for the diffusion sampler).

Every coordinate of a state is equal, so a state is one number ``s``; no piece attends (the cache is never written,
and positions do not interact):

    P(y) = 1 for every token                     (so ``e = 1``, and with momentum ``e = η·e_prev + (1 − η)``)
    R(s, e) = a_p·s + e                          (``a_p``: the contraction at position p, ``a`` unless ``slow`` names p)
    C(s) at position p = logits peaked at round(q·s) (``script is None``: the token reveals the state)
                                  or at script[p + 1] (the state's token is fixed by the script)
    InitState(α) = α                             (deterministic: new states and noise are α)

The prompt's tokens do not matter (``P`` ignores them); only its length does.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from recdiff.model import RecurrentDepthModel
from recdiff.model_config import RecurrentConfig

VOCAB = 256


class CharTokenizer:
    """Token id ``i`` is the character ``chr(i)`` (what stop strings are checked on)."""

    eos_token_id = None

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids)


class ClosedForm(RecurrentDepthModel):
    def __init__(self, a: float = 0.5, q: float = 32.0, script: str | None = None,
                 slow: dict[int, float] | None = None) -> None:
        super().__init__(RecurrentConfig(n_embd=4, n_heads=1, n_layers_in_prelude=1, n_layers_in_recurrent_block=1,
                                         n_layers_in_coda=1, intermediate_size=4, vocab_size=VOCAB, block_size=64))
        self.requires_grad_(False)
        contraction = torch.full((self.config.block_size + 512,), a, dtype=torch.float64)
        for p, value in (slow or {}).items():
            contraction[p] = value
        self.contraction = contraction.float()
        self.q = q
        self.script = None if script is None else torch.tensor([ord(c) for c in script] + [ord(".")] * 600)
        self.tokenizer = CharTokenizer()

    def embed(self, ids: Tensor, call=None, cache=None) -> Tensor:
        return torch.ones((*ids.shape, self.config.n_embd))

    def core_step(self, state: Tensor, embeds: Tensor, call=None, cache=None, step=0) -> Tensor:
        a = self.contraction[call.pos][..., None] if call is not None else self.contraction[0]
        return a * state + embeds

    def decode(self, state: Tensor, call=None, cache=None, float32: bool = True, plane=0) -> Tensor:  # float32 logits
        vocab = torch.arange(VOCAB, dtype=torch.float32)
        if self.script is None:
            return -(vocab - self.q * state[..., :1].float()) ** 2
        return (vocab == self.script[call.pos + 1][..., None]).float()

    def initial_state(self, like: Tensor, init_scale: float, generator=None) -> Tensor:
        return torch.full_like(like, float(init_scale))


def token(q: float, s: float) -> int:
    """The token a state ``s`` reveals: round(q·s), checked to be far from a tie (a test that would hinge on
    rounding says so instead of passing by luck)."""
    x = q * s
    assert abs(x - math.floor(x) - 0.5) > 0.05, f"q·s = {x} is too close to a rounding tie"
    return round(x)
