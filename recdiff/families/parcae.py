"""Parcae (SandyResearch, "Parcae: Stable Looped Language Models"): SandyResearch/parcae-140m, -370m, -770m, -1.3b
(the model cards also say parcae-small-140m, ...), ``config.json`` with ``"_class_name": "ParcaeConfig"``.

prelude → (ln_prelude) → state s_0 → r × [injection, then the core blocks] → C → coda → ln_f → head × logit_scale
(→ softcap). The core runs at its own width (``recurrent_embedding_dimension``) with its own heads, all of them K/V
heads, at the outer head width. Injection: diagonal ``s·exp(−softplus(dt_bias)·exp(A_log)) + softplus(dt_bias)·(e
Bᵀ)``, linear ``W [s, e]`` (state first) or additive ``s + e``. Blocks: pre-norm RMSNorm, ``x += attn(n1 x); x +=
mlp(n2 x)``, q/k/v/o without biases, RoPE on adjacent pairs of ``rope_settings.rope_base`` (positions divided by
``rope_condense_ratio``), then ``qk_norm``'s parameter-free RMS norm of each head; MLP ``fc → nonlinearity → proj``
(``BaseMLP``; ReLU2 is ``0.5·relu(x)²``) or gated (``GatedMLP``). Value embeddings: token tables whose rows, gated by
``2σ(ve_gate(x[:32]))`` per K/V head, are added to an attention layer's values (:func:`value_embeddings`).

The state's init: ``zero`` is recdiff's init scale α = 0; ``like-init`` is α = 1: a truncated normal (±3σ) with the
init strategy's embedding std of the *outer* width (``scaled*``: √(2/(5·n_embd))), times its embedding scale, drawn
from the sequence's seeded generator (the reference draws from torch's global one). Reference:
``parcae_lm/models/parcae/parcae.py`` and ``receval/models/parcae.py`` of minchoCoin/parcae (tests/fixtures/
parcae_tiny).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recdiff.errors import RecdiffError
from recdiff.families.base import Family, concat_adapter
from recdiff.layers import KV, Attention, GatedMLP, RMSNorm, apply_rope, rope_table
from recdiff.model_config import RecurrentConfig

# ParcaeConfig's defaults (parcae_lm/models/config.py and models/parcae/config.py), for keys a config.json leaves out
DEFAULTS: dict[str, Any] = dict(
    block_size=4096, n_embd=4096, intermediate_size=None, num_attention_heads=32, num_key_value_heads=None,
    vocab_size=50254, padding_multiple=512, padded_vocab_size=None, block_class_name="TransformerPreNormBlock",
    norm_class_name="LayerNorm", norm_eps=1e-5, mlp_class_name="BaseMLP", nonlin_name="GELU", bias=False,
    qk_bias=False, init_strategy="scaled", mup_model_scaling_factor=1, use_fused_head="pytorch", clip_qkv=None,
    qk_norm=False, logit_softcap=None, injection_type="diagonal", n_layers_in_recurrent_block=4,
    n_layers_in_prelude=1, n_layers_in_coda=1, state_init="like-init", recurrent_embedding_dimension=1024,
    recurrent_intermediation_embedding_dimension=3520, recurrent_num_attention_heads=None, prelude_norm=False,
    mean_recurrence=32, mean_backprop_depth=8, tie_embeddings=False, use_abacus=False,
    debias_attention=False, center_attention=False,
)
NONLINS: dict[str, Callable[[Tensor], Tensor]] = {
    "ReLU2": lambda x: F.relu(x).pow(2).mul(0.5),   # the reference's Relu2: half the square
    "GELU": F.gelu, "SiLU": F.silu, "ReLU": F.relu,
}
INJECTIONS = ("diagonal", "linear", "add")
VE_GATE_CHANNELS = 32  # the value-embedding gate reads a layer input's first 32 channels


def _scales(strategy: str, d: int, layers: int) -> tuple[float, float, float] | None:
    """(the embedding's init std, the embedding scale, the logit scale) of the reference's init strategy at width
    ``d`` (``parcae_lm/utils/init.py``: ``get_std("embedding")``, ``embedding_scale``, ``logit_scale``), None for a
    strategy it does not define."""
    s = math.sqrt
    std = {"mitchell": 1 / s(d), "normal": 1 / s(d), "llama": 1.0, "llama-by-dim": 1.0, "llama-by-dim-ls": 1.0,
           "kaiming": s(2 / d), "bert": 0.02, "megatron": 0.02, "megatron2": s(1 / (3 * d)),
           "wang": 2 / layers / s(d), "deepnorm-straight": 0.02, "deepnorm-subln": 0.02, "noci-anagnostidis": 1.0,
           "shaped": 1.0, "deep-scale-simple": s(1 / 3), "deep-scale-full": s(1 / 3), "scaled-and-logit-scale": 1.0,
           "bernstein": 1.0, "illiterate": 1.0, "scaled-large-embed": 1.0,
           **dict.fromkeys(("small", "scaled", "scaled-geiping", "scaled-zero", "scaled-stuck", "takase",
                            "takase-scaled"), s(2 / (5 * d)))}
    if strategy not in std:
        return None
    embed = s(d) if strategy in ("takase", "takase-scaled") else 1.0
    logit = {"takase-scaled": s(2 / 5) / s(d)}.get(strategy, 1 / s(d) if strategy in (
        "llama-by-dim-ls", "noci-anagnostidis", "shaped", "deep-scale-simple", "deep-scale-full",
        "scaled-and-logit-scale") else 1.0)
    return std[strategy], embed, logit


def has_ve(i: int, n: int) -> bool:
    """The reference's rule: every other layer, the last one included."""
    return i % 2 == (n - 1) % 2


def layer_ids(cfg: RecurrentConfig) -> dict[tuple[str, int], tuple[int, int]]:
    """Each layer's (table index, attention layer id): the index of its value-embedding table counts the layers
    once (prelude, core, coda); the layer id its attention's gate depends on counts the core ``mean_recurrence``
    times (the reference's ``layer_id`` of a coda block)."""
    P, R, C = cfg.n_layers_in_prelude, cfg.n_layers_in_recurrent_block, cfg.n_layers_in_coda
    out = {("prelude", i): (i, i) for i in range(P)}
    out.update({("core", i): (P + i, P + i) for i in range(R)})
    out.update({("coda", i): (P + R + i, P + R * cfg.mean_recurrence + i) for i in range(C)})
    return out


def gated(cfg: RecurrentConfig, part: str, i: int) -> bool:
    """Whether the attention of layer (part, i) has a value-embedding gate: by its layer id's parity against
    R·mean_backprop_depth (the reference's ``n_layer``)."""
    return has_ve(layer_ids(cfg)[part, i][1], cfg.n_layers_in_recurrent_block * cfg.mean_backprop_depth)


def value_embeddings(cfg: RecurrentConfig) -> tuple[dict[int, int], dict[tuple[str, int], int]]:
    """(table index → width, the layers that use a table → its index). A table exists where its index's parity
    matches the effective layer count's; a layer uses it only where its attention has a gate too, so a checkpoint
    holds tables and gates that no layer uses (as the reference's does)."""
    n = cfg.n_layers
    width = cfg.num_key_value_heads * cfg.head_dim  # the outer layers' K/V width, the core's tables too
    tables = {i: width for i in range(n) if has_ve(i, n)}
    uses = {where: t for where, (t, _) in layer_ids(cfg).items() if t in tables and gated(cfg, *where)}
    return tables, uses


class ParcaeAttention(Attention):
    """q/k/v/o without biases, adjacent-pair RoPE, then (``qk_norm``) each head's parameter-free RMS norm; with a
    gate, a value-embedding row per K/V head added to the values."""

    def __init__(self, cfg: RecurrentConfig, gate: bool) -> None:
        super().__init__(cfg, rope=apply_rope)
        self.head_norm = bool(cfg.family_options.get("qk_norm", False))
        self.ve_gate = nn.Linear(VE_GATE_CHANNELS, self.n_kv, bias=False) if gate else None

    def forward(self, x: Tensor, freqs: Tensor, kv: KV | None, ve: Tensor | None = None) -> Tensor:
        q, k, v = self.qkv(x)
        if ve is not None and self.ve_gate is not None:
            gate = 2 * torch.sigmoid(self.ve_gate(x[..., :VE_GATE_CHANNELS]))  # (B, T, H_kv) in (0, 2)
            v = v + gate.unsqueeze(-1) * ve.view(v.shape)
        q, k = self.rope(q, k, freqs, None)
        if self.head_norm:
            q, k = F.rms_norm(q, (self.hd,)), F.rms_norm(k, (self.hd,))
        return self.attend(q, k, v, kv)


class ParcaeMLP(nn.Module):
    """``proj(nonlin(fc x))`` (the reference's BaseMLP)."""

    def __init__(self, cfg: RecurrentConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, cfg.intermediate_size, bias=False)
        self.proj = nn.Linear(cfg.intermediate_size, cfg.n_embd, bias=False)
        self.nonlin = NONLINS[cfg.family_options.get("nonlin", "GELU")]

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(self.nonlin(self.fc(x)))


class ParcaeBlock(nn.Module):
    def __init__(self, cfg: RecurrentConfig, gate: bool = False) -> None:
        super().__init__()
        self.norm_1 = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.attn = ParcaeAttention(cfg, gate)
        self.norm_2 = RMSNorm(cfg.n_embd, cfg.norm_eps)
        if cfg.family_options.get("mlp", "BaseMLP") == "GatedMLP":
            nonlin = NONLINS[cfg.family_options.get("nonlin", "GELU")]
            self.mlp: nn.Module = GatedMLP(cfg, gate=lambda a, b: nonlin(a) * b)
        else:
            self.mlp = ParcaeMLP(cfg)

    def forward(self, x: Tensor, freqs: Tensor, kv: KV | None, ve: Tensor | None = None) -> Tensor:
        x = self.attn(self.norm_1(x), freqs, kv, ve) + x
        return self.mlp(self.norm_2(x)) + x


def layer(cfg: RecurrentConfig, part: str, i: int) -> nn.Module:
    return ParcaeBlock(cfg.core_config() if part == "core" else cfg, gate=gated(cfg, part, i))


class DiagonalInjection(nn.Module):
    """``s·exp(−softplus(dt_bias)·exp(A_log)) + softplus(dt_bias)·(e Bᵀ)``, as the reference computes it."""

    def __init__(self, cfg: RecurrentConfig) -> None:
        super().__init__()
        self.A_log = nn.Parameter(torch.zeros(cfg.state_width))
        self.dt_bias = nn.Parameter(torch.zeros(cfg.state_width))
        self.B = nn.Parameter(torch.zeros(cfg.state_width, cfg.n_embd))

    def forward(self, state: Tensor, embeds: Tensor) -> Tensor:
        dt = F.softplus(self.dt_bias)
        return state * torch.exp(-dt * torch.exp(self.A_log)) + dt * (embeds @ self.B.T)


class LinearInjection(nn.Module):
    """``W [s, e]`` (the weight under the reference's name ``adapter.adapter``)."""

    def __init__(self, cfg: RecurrentConfig) -> None:
        super().__init__()
        self.adapter = concat_adapter(cfg)

    def forward(self, state: Tensor, embeds: Tensor) -> Tensor:
        return self.adapter(state, embeds)


class AdditiveInjection(nn.Module):
    def forward(self, state: Tensor, embeds: Tensor) -> Tensor:
        return state + embeds


def adapter(cfg: RecurrentConfig) -> nn.Module:
    kind = cfg.family_options.get("injection", "diagonal")
    return {"diagonal": DiagonalInjection, "linear": LinearInjection}.get(kind, lambda c: AdditiveInjection())(cfg)


def table(cfg: RecurrentConfig, length: int) -> Tensor:
    """The reference's ``precompute_freqs_cis``: adjacent-pair RoPE of ``rope_base``, positions divided by
    ``rope_condense_ratio``."""
    return rope_table(cfg.head_dim, length, cfg.rope_base, cfg.family_options.get("rope_condense_ratio", 1))


def read(raw: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    misfits: list[str] = []
    if raw.get("_class_name") != "ParcaeConfig" and raw.get("model_class_name") != "Parcae":
        misfits.append(f"_class_name={raw.get('_class_name')!r} (a Parcae config.json says ParcaeConfig)")
        return {}, misfits
    c = {**DEFAULTS, **raw}
    for key, want in (("block_class_name", "TransformerPreNormBlock"), ("norm_class_name", "RMSNorm"),
                      ("bias", False), ("qk_bias", False), ("clip_qkv", None), ("mup_model_scaling_factor", 1),
                      ("use_abacus", False)):
        if c[key] != want:
            misfits.append(f"{key}={c[key]!r} (recdiff runs {want!r})")
    if c["mlp_class_name"] not in ("BaseMLP", "GatedMLP"):
        misfits.append(f"mlp_class_name={c['mlp_class_name']!r} (recdiff runs BaseMLP, GatedMLP)")
    if c["nonlin_name"] not in NONLINS:
        misfits.append(f"nonlin_name={c['nonlin_name']!r} (recdiff runs {', '.join(NONLINS)})")
    if c["injection_type"] not in INJECTIONS:
        misfits.append(f"injection_type={c['injection_type']!r} (the reference has {', '.join(INJECTIONS)})")
    if c["state_init"] not in ("zero", "like-init"):
        misfits.append(f"state_init={c['state_init']!r} (recdiff draws zero or like-init states: init_scale 0 or 1)")
    if c["use_fused_head"] == "full-triton" and not c["tie_embeddings"]:
        misfits.append("use_fused_head=full-triton with an untied head (its weight is stored transposed)")
    rope = c.get("rope_settings") or {}
    if not isinstance(rope, dict) or not rope.get("use_rope", True):
        misfits.append(f"rope_settings={rope!r} (recdiff runs RoPE)")
        rope = {}
    n_embd, heads = c["n_embd"], c["num_attention_heads"]
    d = n_embd if isinstance(n_embd, int) else 0
    padded = c["padded_vocab_size"]
    if padded is None and isinstance(c["vocab_size"], int) and isinstance(c["padding_multiple"], int):
        padded = -(-c["vocab_size"] // c["padding_multiple"]) * c["padding_multiple"]
    vocab = min(c["vocab_size"], padded) if isinstance(padded, int) and isinstance(c["vocab_size"], int) else None
    depth = (c["n_layers_in_prelude"] + c["n_layers_in_coda"] + c["n_layers_in_recurrent_block"]
             * c["mean_recurrence"]) if all(isinstance(c[k], int) for k in (
                 "n_layers_in_prelude", "n_layers_in_coda", "n_layers_in_recurrent_block", "mean_recurrence")) else 1
    scales = _scales(str(c["init_strategy"]), max(d, 1), max(depth, 1))
    if scales is None:
        misfits.append(f"init_strategy={c['init_strategy']!r} (not one of the reference's)")
        scales = (1.0, 1.0, 1.0)
    std, embed_scale, logit_scale = scales
    kwargs: dict[str, Any] = dict(
        n_embd=n_embd, n_heads=heads, num_key_value_heads=c["num_key_value_heads"] or heads,
        intermediate_size=c["intermediate_size"] or 4 * d, vocab_size=vocab, padded_vocab_size=padded,
        block_size=c["block_size"], n_layers_in_prelude=c["n_layers_in_prelude"],
        n_layers_in_recurrent_block=c["n_layers_in_recurrent_block"], n_layers_in_coda=c["n_layers_in_coda"],
        mean_recurrence=c["mean_recurrence"], mean_backprop_depth=c["mean_backprop_depth"],
        norm_eps=c["norm_eps"], tie_embeddings=bool(c["tie_embeddings"]), qk_bias=False, bias=False,
        rope_base=float(rope.get("rope_base", 50_000)), core_n_embd=c["recurrent_embedding_dimension"],
        core_n_heads=c["recurrent_num_attention_heads"] or heads,
        core_intermediate_size=c["recurrent_intermediation_embedding_dimension"],
        prelude_norm=bool(c["prelude_norm"]), logit_scale=logit_scale, logit_softcap=c["logit_softcap"],
        init_values={"std": std, "embedding": std, "embed_scale": embed_scale},
        family_options=dict(injection=c["injection_type"], mlp=c["mlp_class_name"], nonlin=c["nonlin_name"],
                            qk_norm=bool(c["qk_norm"]), rope_condense_ratio=rope.get("rope_condense_ratio", 1),
                            state_init=c["state_init"], config={k: v for k, v in raw.items()}),
    )
    misfits += _shape_misfits(kwargs)
    return kwargs, misfits


def _shape_misfits(k: dict[str, Any]) -> list[str]:
    """What the reference itself could not run: a core head width other than the outer one (it builds one RoPE
    table), an additive injection between different widths, a core layer whose value embedding is not the core's
    K/V width, a gate reading 32 channels of a narrower layer."""
    out: list[str] = []
    try:
        n, h, kvh, w, ch = k["n_embd"], k["n_heads"], k["num_key_value_heads"], k["core_n_embd"], k["core_n_heads"]
        if n % h or w % ch:
            return out  # RecurrentConfig says so in its own words
        if w // ch != n // h:
            out.append(f"the core's heads are {w // ch} wide (recurrent_embedding_dimension={w} / {ch} heads), the "
                       f"outer ones {n // h}: the reference builds one RoPE table for both")
        if k["family_options"]["injection"] == "add" and w != n:
            out.append(f"additive injection of a {n}-wide embedding into a {w}-wide state")
        cfg = RecurrentConfig(**{**k, "family": "parcae"})
        tables, uses = value_embeddings(cfg)
        for (part, i), t in uses.items():
            width = w if part == "core" else n
            if part == "core" and tables[t] != w:
                out.append(f"core layer {i} adds {kvh * (n // h)}-wide value embeddings to {w}-wide values")
            if width < VE_GATE_CHANNELS:
                out.append(f"{part} layer {i}'s value-embedding gate reads {VE_GATE_CHANNELS} channels of {width}")
    except (TypeError, KeyError, ZeroDivisionError, ValueError):
        pass  # a config without these shapes: RecurrentConfig names what is wrong
    except RecdiffError as err:  # from the config itself
        out.append(str(err).removeprefix("config: "))
    return out


def write(cfg: RecurrentConfig) -> dict[str, Any]:
    """The reference's ParcaeConfig fields (as its ``save_pretrained`` writes them) with ``_class_name``."""
    o = cfg.family_options
    out = dict(o.get("config") or {})
    out.update(
        _class_name="ParcaeConfig", block_size=cfg.block_size, n_embd=cfg.n_embd, num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.num_key_value_heads, intermediate_size=cfg.intermediate_size,
        vocab_size=cfg.vocab_size, padded_vocab_size=cfg.padded_vocab_size,
        n_layers_in_prelude=cfg.n_layers_in_prelude, n_layers_in_recurrent_block=cfg.n_layers_in_recurrent_block,
        n_layers_in_coda=cfg.n_layers_in_coda, mean_recurrence=cfg.mean_recurrence,
        mean_backprop_depth=cfg.mean_backprop_depth, norm_eps=cfg.norm_eps, tie_embeddings=cfg.tie_embeddings,
        recurrent_embedding_dimension=cfg.state_width, recurrent_num_attention_heads=cfg.core_n_heads or cfg.n_heads,
        recurrent_intermediation_embedding_dimension=cfg.core_intermediate_size or cfg.intermediate_size,
        prelude_norm=cfg.prelude_norm, logit_softcap=cfg.logit_softcap, injection_type=o.get("injection", "diagonal"),
        mlp_class_name=o.get("mlp", "BaseMLP"), nonlin_name=o.get("nonlin", "GELU"), qk_norm=o.get("qk_norm", False),
        state_init=o.get("state_init", "like-init"), block_class_name="TransformerPreNormBlock",
        norm_class_name="RMSNorm", bias=False, qk_bias=False,
    )
    out.setdefault("init_strategy", "scaled")
    out["rope_settings"] = {**dict(out.get("rope_settings") or {}), "use_rope": True,
                            "rope_base": cfg.rope_base, "rope_condense_ratio": o.get("rope_condense_ratio", 1)}
    return out


def layout(cfg: RecurrentConfig) -> dict[str, list[tuple[str, int]]]:
    """recdiff's fused q/k/v (``attn.Wqkv``) and output (``attn.proj``) from the reference's c_q, c_k, c_v, c_proj;
    every other name is the reference's."""
    out: dict[str, list[tuple[str, int]]] = {}
    parts = (("prelude", cfg.n_layers_in_prelude, cfg), ("core_block", cfg.n_layers_in_recurrent_block,
                                                          cfg.core_config()), ("coda", cfg.n_layers_in_coda, cfg))
    for part, n, c in parts:
        q, kv = c.n_heads * c.head_dim, c.num_key_value_heads * c.head_dim
        for i in range(n):
            at = f"transformer.{part}.{i}.attn."
            out[at + "Wqkv.weight"] = [(at + "c_q.weight", q), (at + "c_k.weight", kv), (at + "c_v.weight", kv)]
            out[at + "proj.weight"] = [(at + "c_proj.weight", c.n_embd)]
    return out


FAMILY = Family(
    name="parcae",
    title="Parcae: a core of its own width, diagonal or linear injection, QK-norm after RoPE, value embeddings",
    reference="minchoCoin/parcae parcae_lm/models/parcae/parcae.py, receval/models/parcae.py (commit e196f5d; "
              "tests/fixtures/parcae_tiny)",
    block=lambda cfg: ParcaeBlock(cfg),
    table=table,
    read=read,
    write=write,
    layout=layout,
    layer=layer,
    adapter=adapter,
    value_embeddings=value_embeddings,
    project_state=True,
    writes_all=True,
)
