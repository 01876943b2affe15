"""Model shapes for random-weight runs (``python -m recdiff.bench --models NAME``, tests/gpu): keyword arguments of
:class:`recdiff.model_config.RecurrentConfig`, the family included."""

from __future__ import annotations

from typing import Any

from recdiff.families.parcae import read as parcae_config

SHAPES: dict[str, dict[str, Any]] = {
    "random-small": dict(n_embd=256, n_heads=8, n_layers_in_prelude=2, n_layers_in_recurrent_block=4,
                         n_layers_in_coda=2, intermediate_size=704, vocab_size=4096, block_size=1024),
    "huginn": dict(n_embd=5280, n_heads=55, n_layers_in_prelude=2, n_layers_in_recurrent_block=4, n_layers_in_coda=2,
                   intermediate_size=17920, vocab_size=65536, block_size=4096),
    # the retrofitted checkpoints' shapes (smcleish/Recurrent-*: their source models, split prelude/core/coda as the
    # authors' training scripts load them; trained at 1,024 positions)
    "tinyllama": dict(family="retro_llama", n_embd=2048, n_heads=32, num_key_value_heads=4, n_layers_in_prelude=4,
                      n_layers_in_recurrent_block=8, n_layers_in_coda=4, intermediate_size=5632, vocab_size=32000,
                      block_size=1024, tie_embeddings=False, qk_bias=False, norm_eps=1e-5, rope_theta=10000.0,
                      max_position_embeddings=2048, init_values={"embed_scale": 1.0}),
    "llama-3.2": dict(family="retro_llama", n_embd=2048, n_heads=32, num_key_value_heads=8, n_layers_in_prelude=4,
                      n_layers_in_recurrent_block=6, n_layers_in_coda=4, intermediate_size=8192, vocab_size=128256,
                      block_size=1024, tie_embeddings=False, qk_bias=False, norm_eps=1e-5, rope_theta=500000.0,
                      rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                      max_position_embeddings=131072, init_values={"embed_scale": 1.0}),
    "olmo-2": dict(family="retro_olmo", n_embd=2048, n_heads=16, num_key_value_heads=16, head_dim=128,
                   n_layers_in_prelude=4, n_layers_in_recurrent_block=6, n_layers_in_coda=4, intermediate_size=8192,
                   vocab_size=100352, block_size=1024, tie_embeddings=False, qk_bias=False, norm_eps=1e-6,
                   rope_theta=500000.0, max_position_embeddings=4096, init_values={"embed_scale": 1.0}),
    # ByteDance/Ouro-1.4B: 24 layers looped total_ut_steps = 4 times, no injection (the block is its causal window
    # here, not its 65,536 positions: the bench and the GPU tests run short prompts)
    "ouro-1.4b": dict(family="ouro", n_embd=2048, n_heads=16, num_key_value_heads=16, head_dim=128,
                      n_layers_in_prelude=0, n_layers_in_recurrent_block=24, n_layers_in_coda=0,
                      intermediate_size=5632, vocab_size=49152, block_size=4096, tie_embeddings=False, qk_bias=False,
                      norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=65536, mean_recurrence=4,
                      init_values={"embed_scale": 1.0}),
    # SandyResearch/parcae-140m (parcae_lm/configs/parcae/parcae-small-140m.py): prelude / core / coda of 2 layers,
    # width 768, 6 heads, ReLU² MLP 3072, QK-norm, a prelude norm, diagonal injection, value embeddings, tied; r = 8
    "parcae-140m": {**parcae_config(dict(
        _class_name="ParcaeConfig", block_size=2048, vocab_size=32768, padding_multiple=64, n_embd=768,
        num_attention_heads=6, num_key_value_heads=6, intermediate_size=3072, bias=False, tie_embeddings=True,
        block_class_name="TransformerPreNormBlock", norm_class_name="RMSNorm", norm_eps=1e-5, mlp_class_name="BaseMLP",
        nonlin_name="ReLU2", qk_norm=True, logit_softcap=None, prelude_norm=True, init_strategy="scaled-zero",
        injection_type="diagonal", state_init="like-init", recurrent_embedding_dimension=768,
        recurrent_intermediation_embedding_dimension=3072, n_layers_in_recurrent_block=2, n_layers_in_prelude=2,
        n_layers_in_coda=2, mean_recurrence=8, mean_backprop_depth=4))[0], "family": "parcae"},
}
