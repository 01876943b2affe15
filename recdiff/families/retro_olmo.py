"""Retrofitted OLMo-2 (OLMo-2-0425-1B): smcleish/Recurrent-OLMo-2-0425-*.

Each sublayer's output normalised before the residual add, ``x += n1(attn(x)); x += n2(mlp(x))``; QK-norm (RMS norms
``attn.q_norm`` / ``attn.k_norm`` over the whole projected q and k, before RoPE); attention heads of ``head_dim``;
Hugging Face's rotate-half RoPE of ``rope_theta``; ``ln_f`` after the coda only; an untied head. Reference:
``convert_pretrained_model/raven_modeling_minimal_olmo.py`` of LoopedLMs/retrofitting-recurrence
(tests/fixtures/retro_tiny).
"""

from __future__ import annotations

from torch import Tensor, nn

from recdiff.families import retro
from recdiff.families.base import Family, hf_rope_table
from recdiff.layers import KV, Attention, GatedMLP, RMSNorm, apply_rope_half
from recdiff.model_config import RecurrentConfig


class PostNormBlock(nn.Module):
    def __init__(self, cfg: RecurrentConfig) -> None:
        super().__init__()
        self.norm_1 = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.attn = Attention(cfg, rope=apply_rope_half, qk_norm=True)
        self.norm_2 = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.mlp = GatedMLP(cfg)

    def forward(self, x: Tensor, freqs: Tensor, kv: KV | None) -> Tensor:
        x = self.norm_1(self.attn(x, freqs, kv)) + x
        return self.norm_2(self.mlp(x)) + x


FAMILY = Family(
    name="retro_olmo",
    title="retrofitted OLMo-2: post-sublayer norms, QK-norm, rotate-half RoPE, untied head",
    reference="LoopedLMs/retrofitting-recurrence convert_pretrained_model/raven_modeling_minimal_olmo.py",
    block=PostNormBlock,
    table=hf_rope_table,
    read=lambda raw: retro.read(raw, head_dim_free=True),
    write=lambda cfg: retro.write(cfg, initial_state_mode="random"),
)
