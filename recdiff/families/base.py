"""What a model family declares (:class:`Family`), and the RoPE tables the families share.

Every family is a prelude → core (iterated) → coda model with the same module tree (``transformer.wte``,
``prelude``, ``adapter``, ``core_block``, ``coda``, ``ln_f``, ``lm_head``; ``exit_gate`` where the family has one);
what differs is declared here: the block (its norms, attention and RoPE pairing), how RoPE's angle table is computed,
whether ``ln_f`` also normalises the final state before the coda, the loop's shape (input injected by a linear
adapter on [state, embedding], or the embedding entering once; ln_f closing every recurrence; an exit gate), how
``config.json`` is read and written, and the checkpoint's tensor names where they are not recdiff's. Recognition
(:func:`recdiff.recognition.recognise`) needs nothing more: a folder fits a family when its config reads without
complaint and its tensor names are exactly those of that family's model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor, nn

from recdiff.errors import RecdiffError
from recdiff.layers import angle_table, rope_table
from recdiff.model_config import RecurrentConfig

# config.json keys the reference's RavenConfig writes for every family (the Hugging Face glue reads them)
RAVEN_CONSTANTS: dict[str, Any] = dict(
    model_type="huginn_raven",
    architectures=["RavenForCausalLM"],
    block_class_name="SandwichBlock",
    norm_class_name="RMSNorm_llama",
    mlp_class_name="GatedMLP",
    nonlin_name="SiLU",
    injection_type="linear",
    state_init="like-init",
    sampling_scheme="poisson-lognormal-filling",
)


@dataclass(frozen=True)
class Family:
    """One model family: everything that is not shared by all of them.

    ``read``: the family's reading of a raw ``config.json`` → (keyword arguments of :class:`RecurrentConfig`, what
    did not fit: one short phrase each; empty when it fits). ``write``: the keys a saved ``config.json`` holds
    besides :class:`RecurrentConfig`'s own fields, for the family's reference code to read it back."""

    name: str
    title: str                                             # one line: the models it covers
    reference: str                                         # the modeling file its parity fixtures came from
    block: Callable[[RecurrentConfig], nn.Module]          # prelude, core, coda blocks: forward(x, freqs, kv)
    # the angle table RoPE indexes by position: [1, length, 1, head_dim/2, 2] (cos, sin)
    table: Callable[[RecurrentConfig, int], Tensor] = lambda cfg, n: rope_table(cfg.head_dim, n, cfg.rope_base)
    ln_f_on_state: bool = False                            # ln_f on the final state before the coda, too
    read: Callable[[dict[str, Any]], tuple[dict[str, Any], list[str]]] = lambda raw: (dict(raw), [])
    write: Callable[[RecurrentConfig], dict[str, Any]] = lambda cfg: dict(RAVEN_CONSTANTS)
    # The loop's shape. injection: each recurrence reads the adapter of [state, embedding] (Huginn, the retrofits);
    # without it the embedding enters once, as the first recurrence's input, and each recurrence reads the last one's
    # output (Ouro). loop_norm: ln_f closes every recurrence (the state is normed; the head reads it as it is).
    # exit_gate: a Linear(E, 1) on each recurrence's state whose sigmoid is the probability of exiting there.
    injection: bool = True
    loop_norm: bool = False
    exit_gate: bool = False
    # the checkpoint's tensor names where they are not recdiff's: our name → [(their name, rows)], theirs stacked
    # along the first dimension into ours (a fused q/k/v projection from three); None: the names are recdiff's
    layout: Callable[[RecurrentConfig], dict[str, list[tuple[str, int]]]] | None = None
    # Hooks of a family whose layers differ by place (Parcae), each None where the family has no such thing.
    # layer(cfg, part, i): the block at prelude / core / coda index i (default: ``block(cfg)``, the core's at its
    # own width). adapter(cfg): the input injection, forward(state, embedding) (default: a linear map of the two
    # concatenated). value_embeddings(cfg): token tables added to some attention layers' values: (each table's
    # effective-layer index → its width, each (part, i) that uses one → that table's index).
    layer: Callable[[RecurrentConfig, str, int], nn.Module] | None = None
    adapter: Callable[[RecurrentConfig], nn.Module] | None = None
    value_embeddings: Callable[[RecurrentConfig], tuple[dict[int, int], dict[tuple[str, int], int]]] | None = None
    project_state: bool = False                            # a Linear C maps the final state to the coda's width
    # config.json is the family's own keys alone (the reference's dataclass refuses any other)
    writes_all: bool = False


class ConcatAdapter(nn.Linear):
    """Huginn's input injection: one Linear over [state, embedding] (its weight named as the reference's)."""

    def forward(self, state: Tensor, embeds: Tensor) -> Tensor:  # type: ignore[override]
        return super().forward(torch.cat([state, embeds], dim=-1))


def concat_adapter(cfg: RecurrentConfig) -> nn.Module:
    return ConcatAdapter(cfg.state_width + cfg.n_embd, cfg.state_width, bias=cfg.bias)


# fields only recdiff's own reading of a family's config.json sets (never a key of the Raven layout's config.json)
OWN_FIELDS = {"family", "core_n_embd", "core_n_heads", "core_intermediate_size", "prelude_norm", "logit_scale",
              "logit_softcap", "family_options"}


def known_fields() -> set[str]:
    """The fields a Raven-layout ``config.json`` (Huginn, the retrofits) may set as they are."""
    return {f.name for f in dataclasses.fields(RecurrentConfig)} - OWN_FIELDS


# ---------------------------------------------------------------------------------------------- Hugging Face RoPE
# The RoPE variants recdiff runs: those checked against the retrofits' reference code (transformers 4.51 there,
# transformers' own functions here). Others are refused: ``dynamic`` and ``longrope`` change with the sequence length
# (no fixed table), and transformers' ``yarn`` changed between 4.51 and 5.x (4.51 sets its factor to
# max_position_embeddings / original_max_position_embeddings), so "transformers' own" is not one thing.
ROPE_KINDS = ("default", "linear", "llama3")


def rope_kind(scaling: dict[str, Any] | None) -> str:
    return "default" if not scaling else str(scaling.get("rope_type", scaling.get("type", "default")))


def rope_misfits(raw: dict[str, Any]) -> list[str]:
    """What keeps ``raw``'s Hugging Face RoPE fields (``rope_theta``, ``rope_scaling``) from a fixed table."""
    out = []
    theta = raw.get("rope_theta")
    if not isinstance(theta, (int, float)) or isinstance(theta, bool) or theta <= 0:
        out.append("no rope_theta" if theta is None else f"rope_theta={theta!r} is not a positive number")
    scaling = raw.get("rope_scaling")
    if scaling is not None and not isinstance(scaling, dict):
        out.append(f"rope_scaling={scaling!r} is not a mapping")
    elif rope_kind(scaling) not in ROPE_KINDS:
        out.append(f"rope_scaling type {rope_kind(scaling)} (recdiff runs {', '.join(ROPE_KINDS)})")
    return out


def hf_rope_table(cfg: RecurrentConfig, length: int) -> Tensor:
    """Hugging Face's RoPE of ``rope_theta``, ``rope_scaling`` and ``head_dim`` as an angle table: the plain
    inverse frequencies, or for a scaled variant (:data:`ROPE_KINDS`: ``llama3``, ``linear``) the inverse
    frequencies and attention factor of transformers' own ``ROPE_INIT_FUNCTIONS``."""
    kind = rope_kind(cfg.rope_scaling)
    d = cfg.head_dim
    if kind == "default":
        inv = 1.0 / (float(cfg.rope_theta) ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
        return angle_table(inv, length)
    try:
        from transformers import LlamaConfig
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    except ImportError as err:
        raise RecdiffError(f"rope_scaling type {kind} needs transformers' RoPE functions ({err})") from None
    if kind not in ROPE_INIT_FUNCTIONS:
        raise RecdiffError(f"rope_scaling type {kind!r} is not one of transformers' ({', '.join(ROPE_INIT_FUNCTIONS)})")
    hf = LlamaConfig(hidden_size=cfg.n_embd, num_attention_heads=cfg.n_heads,
                     num_key_value_heads=cfg.num_key_value_heads, head_dim=d, rope_theta=float(cfg.rope_theta),
                     rope_scaling=dict(cfg.rope_scaling or {}),
                     max_position_embeddings=cfg.max_position_embeddings or cfg.block_size)
    target = torch.get_default_device()  # a model built under torch.device(...): its table there, computed on a CPU
    with torch.device("cpu"):
        inv, scale = ROPE_INIT_FUNCTIONS[kind](hf, torch.device("cpu"))
        return angle_table(inv, length, float(scale)).to(target)
