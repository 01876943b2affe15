"""What the retrofitted families share (McLeish et al. 2025, github:LoopedLMs/retrofitting-recurrence): their
``config.json`` is Huginn's with the source model's shapes written over it.

Read from it: ``head_dim``, ``num_key_value_heads``, ``rope_theta`` and ``rope_scaling`` (Hugging Face's RoPE; the
``rope_base`` the conversion also writes is never read by the reference), ``max_position_embeddings``,
``init_values.embed_scale`` (1.0) and ``tie_embeddings`` (false). Not read: the token ids, which are Huginn's
(65504 … 65509, ordinary tokens of a Llama or OLMo tokenizer), so the tokenizer's own end-of-text id ends generation.
"""

from __future__ import annotations

from typing import Any

from recdiff.families.base import RAVEN_CONSTANTS, known_fields, rope_misfits
from recdiff.model_config import RecurrentConfig

IGNORED = ("family", "eos_token_id", "rope_base")


def read(raw: dict[str, Any], head_dim_free: bool) -> tuple[dict[str, Any], list[str]]:
    """``raw`` as keyword arguments of :class:`RecurrentConfig`, and what does not fit a retrofitted model.
    ``head_dim_free``: the attention's head width is ``head_dim`` (OLMo); else n_embd / n_heads, which ``head_dim``
    (read by the RoPE) must equal (Llama)."""
    misfits = rope_misfits(raw)
    n_embd, n_heads, hd = raw.get("n_embd"), raw.get("n_heads"), raw.get("head_dim")
    if not head_dim_free and hd is not None and isinstance(n_embd, int) and isinstance(n_heads, int) and n_heads \
            and hd * n_heads != n_embd:
        misfits.append(f"head_dim={hd} is not n_embd/n_heads={n_embd}/{n_heads}")
    if hd is not None and (not isinstance(hd, int) or isinstance(hd, bool) or hd < 2 or hd % 2):
        misfits.append(f"head_dim={hd!r} is not an even integer")
    mode = raw.get("initial_state_mode", "random")
    if mode != "random":
        misfits.append(f"initial_state_mode={mode} (recdiff runs the random initial state only)")
    if raw.get("test_time_noise", 0):
        misfits.append(f"test_time_noise={raw['test_time_noise']} (state noise is the samplers' beta in recdiff)")
    names = known_fields() - set(IGNORED)
    return {k: v for k, v in raw.items() if k in names}, misfits


def write(cfg: RecurrentConfig, **extra: Any) -> dict[str, Any]:
    """The keys the reference's config needs besides recdiff's fields."""
    out = {**RAVEN_CONSTANTS, "head_dim": cfg.head_dim, "rope_theta": cfg.rope_theta,
           "max_position_embeddings": cfg.max_position_embeddings or cfg.block_size, **extra}
    if cfg.rope_scaling:
        out["rope_scaling"] = dict(cfg.rope_scaling)
    return out
