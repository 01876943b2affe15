"""Retrofitted Llama (TinyLlama-1.1B-3T, Llama-3.2-1B): smcleish/Recurrent-{TinyLlama-3T,Llama-3.2}-*.

Pre-norm blocks, ``x += attn(n1 x); x += mlp(n2 x)`` (no ``norm_3``/``norm_4``); grouped-query attention without
q/k bias; Hugging Face's rotate-half RoPE of ``rope_theta`` and ``rope_scaling`` (Llama-3.2: ``llama3``); ``ln_f``
after the coda only; an untied head. Reference: ``convert_pretrained_model/raven_modeling_minimal_llama.py`` of
LoopedLMs/retrofitting-recurrence (tests/fixtures/retro_tiny).
"""

from __future__ import annotations

from torch import Tensor, nn

from recdiff.families import retro
from recdiff.families.base import Family, hf_rope_table
from recdiff.layers import KV, Attention, GatedMLP, RMSNorm, apply_rope_half
from recdiff.model_config import RecurrentConfig


class PreNormBlock(nn.Module):
    def __init__(self, cfg: RecurrentConfig) -> None:
        super().__init__()
        self.norm_1 = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.attn = Attention(cfg, rope=apply_rope_half)
        self.norm_2 = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.mlp = GatedMLP(cfg)

    def forward(self, x: Tensor, freqs: Tensor, kv: KV | None) -> Tensor:
        x = self.attn(self.norm_1(x), freqs, kv) + x
        return self.mlp(self.norm_2(x)) + x


FAMILY = Family(
    name="retro_llama",
    title="retrofitted TinyLlama and Llama-3.2: pre-norm blocks, GQA, rotate-half RoPE (llama3 scaling), untied head",
    reference="LoopedLMs/retrofitting-recurrence convert_pretrained_model/raven_modeling_minimal_llama.py",
    block=PreNormBlock,
    table=hf_rope_table,
    read=lambda raw: retro.read(raw, head_dim_free=False),
    write=retro.write,
)
