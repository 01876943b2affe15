"""Ouro (ByteDance Seed, "Scaling Latent Reasoning via Looped Language Models"): ByteDance/Ouro-1.4B, Ouro-2.6B
and their -Thinking variants, ``model_type: ouro``.

All layers loop ``total_ut_steps`` times: no prelude, no coda, no input injection. The embedding (unscaled) is the
first loop's input; every loop ends in the final norm (``model.norm``), whose output is the next loop's input and
what the head reads. The layer normalises each sublayer's input and output, ``x += n2(attn(n1 x)); x +=
n4(mlp(n3 x))``; grouped-query attention without biases, rotate-half RoPE of ``rope_theta`` / ``rope_scaling``,
a head width of ``head_dim``. An exit gate (``model.early_exit_gate``, Linear(E, 1)) on each loop's normed state gives
λ_t = σ(gate_t), the probability of exiting at loop t once no earlier loop was exited at. A K/V cache per (loop,
layer): recdiff's per-step planes. Reference: the Hugging Face remote code ``modeling_ouro.py`` (tests/fixtures/
ouro_tiny).

The checkpoint's tensor names are Hugging Face's; recdiff's blocks fuse q/k/v and gate/up, so the names map through
:func:`layout`.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from recdiff.families.base import Family, hf_rope_table, rope_misfits
from recdiff.layers import KV, Attention, GatedMLP, RMSNorm, apply_rope_half
from recdiff.model_config import RecurrentConfig

# config.json keys → RecurrentConfig fields
FIELDS = {"hidden_size": "n_embd", "num_attention_heads": "n_heads", "num_key_value_heads": "num_key_value_heads",
          "num_hidden_layers": "n_layers_in_recurrent_block", "intermediate_size": "intermediate_size",
          "vocab_size": "vocab_size", "max_position_embeddings": "block_size", "rms_norm_eps": "norm_eps",
          "tie_word_embeddings": "tie_embeddings", "total_ut_steps": "mean_recurrence", "rope_theta": "rope_theta",
          "rope_scaling": "rope_scaling", "head_dim": "head_dim", "eos_token_id": "eos_token_id"}
# a layer's tensors: recdiff's name → the reference's, in the order recdiff stacks them
NORMS = {"norm_1": "input_layernorm", "norm_2": "input_layernorm_2", "norm_3": "post_attention_layernorm",
         "norm_4": "post_attention_layernorm_2"}


class OuroBlock(nn.Module):
    def __init__(self, cfg: RecurrentConfig) -> None:
        super().__init__()
        self.norm_1 = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.attn = Attention(cfg, rope=apply_rope_half)
        self.norm_2 = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.norm_3 = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.mlp = GatedMLP(cfg)
        self.norm_4 = RMSNorm(cfg.n_embd, cfg.norm_eps)

    def forward(self, x: Tensor, freqs: Tensor, kv: KV | None) -> Tensor:
        x = self.norm_2(self.attn(self.norm_1(x), freqs, kv)) + x
        return self.norm_4(self.mlp(self.norm_3(x))) + x


def read(raw: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    misfits = []
    if raw.get("model_type") != "ouro":
        misfits.append(f"model_type={raw.get('model_type')!r} (an Ouro config.json says ouro)")
    misfits += rope_misfits(raw)
    if raw.get("use_sliding_window") or any(t != "full_attention" for t in raw.get("layer_types") or []):
        misfits.append("sliding-window attention (recdiff runs full attention only)")
    if raw.get("hidden_act", "silu") != "silu":
        misfits.append(f"hidden_act={raw['hidden_act']!r} (recdiff's MLP gate is SiLU)")
    kwargs = {ours: raw[theirs] for theirs, ours in FIELDS.items() if raw.get(theirs) is not None}
    kwargs.update(n_layers_in_prelude=0, n_layers_in_coda=0, qk_bias=False, bias=False,
                  init_values={"embed_scale": 1.0})
    return kwargs, misfits


def write(cfg: RecurrentConfig) -> dict[str, Any]:
    """The keys the reference's ``OuroConfig`` reads (``auto_map`` left out: recdiff's files carry no code)."""
    out = {theirs: getattr(cfg, ours) for theirs, ours in FIELDS.items() if getattr(cfg, ours) is not None}
    out.update(model_type="ouro", architectures=["OuroForCausalLM"], hidden_act="silu", use_sliding_window=False,
               layer_types=["full_attention"] * cfg.n_layers_in_recurrent_block, early_exit_threshold=1.0)
    return out


def layout(cfg: RecurrentConfig) -> dict[str, list[tuple[str, int]]]:
    q, kv = cfg.n_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    out = {"transformer.wte.weight": [("model.embed_tokens.weight", cfg.padded_vocab_size)],
           "transformer.ln_f.weight": [("model.norm.weight", cfg.n_embd)],
           "exit_gate.weight": [("model.early_exit_gate.weight", 1)],
           "exit_gate.bias": [("model.early_exit_gate.bias", 1)],
           "lm_head.weight": [("lm_head.weight", cfg.padded_vocab_size)]}
    for i in range(cfg.n_layers_in_recurrent_block):
        ours, theirs = f"transformer.core_block.{i}.", f"model.layers.{i}."
        attn, mlp = theirs + "self_attn.", theirs + "mlp."
        out[ours + "attn.Wqkv.weight"] = [(attn + "q_proj.weight", q), (attn + "k_proj.weight", kv),
                                          (attn + "v_proj.weight", kv)]
        out[ours + "attn.proj.weight"] = [(attn + "o_proj.weight", cfg.n_embd)]
        out[ours + "mlp.fc.weight"] = [(mlp + "gate_proj.weight", cfg.intermediate_size),
                                       (mlp + "up_proj.weight", cfg.intermediate_size)]
        out[ours + "mlp.proj.weight"] = [(mlp + "down_proj.weight", cfg.n_embd)]
        for norm, name in NORMS.items():
            out[ours + f"{norm}.weight"] = [(theirs + f"{name}.weight", cfg.n_embd)]
    return out


FAMILY = Family(
    name="ouro",
    title="Ouro: every layer looped, no injection, a norm closing each loop, an exit gate, GQA, rotate-half RoPE",
    reference="Hugging Face remote code modeling_ouro.py (ByteDance/Ouro-1.4B; tests/fixtures/ouro_tiny)",
    block=OuroBlock,
    table=hf_rope_table,
    read=read,
    write=write,
    injection=False,
    loop_norm=True,
    exit_gate=True,
    layout=layout,
)
