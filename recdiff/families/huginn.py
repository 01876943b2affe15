"""Huginn-0125 (tomg-group-umd/huginn-0125) and the models recdiff trains (the embedded default).

Four norms per block, ``x = n2(attn(n1 x) + x); x = n4(mlp(n3 x) + x)``; q/k biases; RoPE on adjacent pairs from
``rope_base``; the embedding times ``init_values.embed_scale`` (√n_embd); ``ln_f`` on the final state and again
after the coda; a tied head unless ``tie_embeddings`` is false. Reference: ``recpre/raven_modeling_minimal.py`` of
seal-rg/recurrent-pretraining (tests/fixtures/raven_tiny).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from recdiff.families.base import Family, known_fields
from recdiff.layers import KV, Attention, GatedMLP, RMSNorm
from recdiff.model_config import RecurrentConfig


class SandwichBlock(nn.Module):
    def __init__(self, cfg: RecurrentConfig) -> None:
        super().__init__()
        self.norm_1 = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.norm_2 = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.mlp = GatedMLP(cfg)
        self.norm_3 = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.norm_4 = RMSNorm(cfg.n_embd, cfg.norm_eps)

    def forward(self, x: Tensor, freqs: Tensor, kv: KV | None) -> Tensor:
        x = self.norm_2(self.attn(self.norm_1(x), freqs, kv), x)
        return self.norm_4(self.mlp(self.norm_3(x)), x)


def read(raw: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Huginn's fields as they are; its attention's head width is n_embd / n_heads whatever ``head_dim`` says."""
    misfits = []
    n_embd, n_heads, hd = raw.get("n_embd"), raw.get("n_heads"), raw.get("head_dim")
    if hd is not None and isinstance(n_embd, int) and isinstance(n_heads, int) and n_heads and hd * n_heads != n_embd:
        misfits.append(f"head_dim={hd} with n_embd={n_embd}, n_heads={n_heads}")
    names = known_fields() - {"family", "rope_theta", "rope_scaling", "max_position_embeddings"}
    return {k: v for k, v in raw.items() if k in names}, misfits


FAMILY = Family(
    name="huginn",
    title="Huginn-0125 and recdiff's own models: sandwich blocks (four norms), q/k bias, adjacent-pair RoPE",
    reference="seal-rg/recurrent-pretraining recpre/raven_modeling_minimal.py (commit 59e0b69)",
    block=SandwichBlock,
    ln_f_on_state=True,
    read=read,
)
