"""The layers every model family is built from: RMS norm, attention over the engine's cache, the gated MLP, RoPE.

A family (:mod:`recdiff.families`) composes its blocks from these; which RoPE pairing (adjacent or rotate-half) and
whether q and k are normalised are the attention's arguments. Norms, RoPE, softmax and logits are computed in
float32 whatever the weights' dtype.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recdiff import fused
from recdiff.cache import Call, SlotKV
from recdiff.model_config import RecurrentConfig

KV = tuple[SlotKV, Call, int, "int | Tensor"]  # cache, call, layer slot, recurrence step (per_step planes)
Rope = Callable[[Tensor, Tensor, Tensor, "Tensor | None"], tuple[Tensor, Tensor]]


def rms_norm(x: Tensor, weight: Tensor, eps: float, residual: Tensor | None = None) -> Tensor:
    """``x`` (plus ``residual``) normalised in float32 whatever the weights' dtype, times ``weight``."""
    if residual is not None:
        x = x + residual
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight


def silu_gate(a: Tensor, b: Tensor) -> Tensor:
    return F.silu(a) * b


class RMSNorm(nn.Module):
    fused = False  # each call one kernel (recdiff/fused.py); set by RecurrentDepthModel.set_fused

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor, residual: Tensor | None = None) -> Tensor:
        """norm(x + residual): the add is the norm's first operation (one kernel with it when fused)."""
        return (fused.compiled(rms_norm) if self.fused else rms_norm)(x, self.weight, self.eps, residual)


# ---------------------------------------------------------------------------------------------- RoPE
def rope_table(head_dim: int, length: int, base: float, condense: float = 1) -> Tensor:
    """``[1, length, 1, head_dim/2, 2]``: cos and sin of pos / base^(2i/head_dim); ``condense``: positions divided by
    it (Parcae's ``rope_condense_ratio``)."""
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    return angle_table(inv, length, positions=None if condense == 1 else
                       torch.arange(length, dtype=torch.float32) / condense)


def angle_table(inv_freq: Tensor, length: int, scale: float = 1.0, positions: Tensor | None = None) -> Tensor:
    """``[1, length, 1, len(inv_freq), 2]``: cos and sin of pos · inv_freq, each times ``scale`` (a scaled RoPE's
    attention factor; 1 leaves them as they are); ``positions`` (float32, ``length`` of them): other angles' pos
    than 0 … length − 1 (Parcae's condensed positions)."""
    pos = torch.arange(length, dtype=torch.float32, device=inv_freq.device) if positions is None else positions
    ang = torch.outer(pos.to(inv_freq.device), inv_freq.float())
    cos, sin = ang.cos(), ang.sin()
    if scale != 1.0:
        cos, sin = cos * scale, sin * scale
    return torch.stack([cos[None, :, None, :], sin[None, :, None, :]], dim=4)


def apply_rope(q: Tensor, k: Tensor, freqs: Tensor, bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Rotate adjacent pairs (2i, 2i+1) of every head; q, k: ``(B, T, H, D)``, computed in float32; ``bias``
    (``(2, 1, H, D)``, Huginn's qk_bias) is added to q and k first."""
    if bias is not None:
        q, k = q + bias[0], k + bias[1]
    qk = torch.cat([q, k], dim=2).unflatten(-1, (-1, 2)).float()  # (B, T, Hq+Hk, D/2, 2)
    cos, sin = freqs[..., 0], freqs[..., 1]
    out = torch.stack([qk[..., 0] * cos - qk[..., 1] * sin, qk[..., 1] * cos + qk[..., 0] * sin], -1).flatten(3)
    return torch.split(out.type_as(q), q.shape[2], dim=2)  # type: ignore[return-value]


def apply_rope_half(q: Tensor, k: Tensor, freqs: Tensor, bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Rotate the pairs (i, i + D/2) of every head (Hugging Face's ``rotate_half`` RoPE); otherwise as
    :func:`apply_rope`. The same products and sums as ``q·cos + rotate_half(q)·sin`` with duplicated cos/sin."""
    if bias is not None:
        q, k = q + bias[0], k + bias[1]
    x1, x2 = torch.cat([q, k], dim=2).float().chunk(2, dim=-1)  # (B, T, Hq+Hk, D/2) each
    cos, sin = freqs[..., 0], freqs[..., 1]
    out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    return torch.split(out.type_as(q), q.shape[2], dim=2)  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------- attention
# PyTorch's fused CPU attention kernel, the op scaled_dot_product_attention calls for a float mask on a CPU (a private
# aten op: where a torch has none, scaled_dot_product_attention itself is called with the same float mask)
_CPU_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def cached_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, gqa: bool) -> Tensor:
    """Attention of ``q`` ``(B, H, T, D)`` over a cache's keys under a boolean mask ``(B, 1, T, S)``.

    Eagerly on a CPU this calls PyTorch's fused CPU kernel exactly as ``scaled_dot_product_attention`` does (with
    the mask as an additive float mask), as the aten op itself. Compiled CPU code computes it as two batched
    products around a softmax that inductor fuses with the mask, in float32 as the kernel does: the kernel's fixed
    cost per call outweighs a one-position step's attention (docs/speed.md)."""
    if q.device.type == "cpu" and not gqa and torch.compiler.is_compiling():
        s = (q.float() @ k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5
        return (torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v.float()).to(q.dtype)
    if q.device.type == "cpu" and not gqa:
        bias = torch.zeros((), dtype=q.dtype, device=q.device).masked_fill(~mask, float("-inf"))
        if _CPU_FLASH is None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return _CPU_FLASH(q, k, v, attn_mask=bias)[0]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)


class Attention(nn.Module):
    """Grouped-query attention with one fused q/k/v projection (``Wqkv``: q rows, then k, then v) and RoPE of the
    family's pairing (``rope``). ``qk_norm``: RMS norms over the whole projected q and k (``q_norm``, ``k_norm``)
    before the heads are split and rotated."""

    fused = False  # q/k bias and RoPE in one kernel

    def __init__(self, cfg: RecurrentConfig, rope: Rope = apply_rope, qk_norm: bool = False) -> None:
        super().__init__()
        self.n_head, self.n_kv, self.hd = cfg.n_heads, cfg.num_key_value_heads, cfg.head_dim
        self.chunks = [self.n_head * self.hd, self.n_kv * self.hd, self.n_kv * self.hd]
        self.Wqkv = nn.Linear(cfg.n_embd, sum(self.chunks), bias=False)
        self.qk_bias = nn.Parameter(torch.zeros(2, 1, self.n_head, self.hd)) if cfg.qk_bias else None
        if qk_norm:
            self.q_norm = RMSNorm(self.chunks[0], cfg.norm_eps)
            self.k_norm = RMSNorm(self.chunks[1], cfg.norm_eps)
        self.qk_norm = qk_norm
        self.rope = rope
        self.proj = nn.Linear(self.chunks[0], cfg.n_embd, bias=False)

    def forward(self, x: Tensor, freqs: Tensor, kv: KV | None) -> Tensor:
        q, k, v = self.qkv(x)
        q, k = (fused.compiled(self.rope) if self.fused else self.rope)(q, k, freqs, self.qk_bias)
        return self.attend(q, k, v, kv)

    def qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q, k and v of ``x`` as heads ``(B, T, H, D)``, q and k normed first where ``qk_norm``; not rotated."""
        B, T, _ = x.shape
        q, k, v = self.Wqkv(x).split(self.chunks, dim=2)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        return (q.view(B, T, self.n_head, self.hd), k.view(B, T, self.n_kv, self.hd), v.view(B, T, self.n_kv, self.hd))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, kv: KV | None) -> Tensor:
        """Attention of the rotated q, k and v ``(B, T, H, D)`` (over the cache's keys, with one), projected out."""
        B, T = q.shape[:2]
        if kv is None:  # no cache: plain causal attention over the call's own positions
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H, T, D)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1, enable_gqa=self.n_kv != self.n_head)
        else:
            cache, call, slot, step = kv
            keys, values = cache.update(slot, call, k, v, step)  # (B, H, S, D)
            y = cached_attention(q.transpose(1, 2), keys, values, call.mask, self.n_kv != self.n_head)
        return self.proj(y.transpose(1, 2).reshape(B, T, self.chunks[0]))


class GatedMLP(nn.Module):
    """One projection to gate and value rows (``fc``: gate rows first), the gate's activation times the value,
    projected back (``proj``). ``gate``: SiLU (Huginn, Llama, OLMo-2)."""

    fused = False  # the gate in one kernel

    def __init__(self, cfg: RecurrentConfig, gate: Callable[[Tensor, Tensor], Tensor] = silu_gate) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 2 * cfg.intermediate_size, bias=False)
        self.proj = nn.Linear(cfg.intermediate_size, cfg.n_embd, bias=False)
        self.gate = gate

    def forward(self, x: Tensor) -> Tensor:
        a, b = self.fc(x).chunk(2, dim=-1)
        return self.proj((fused.compiled(self.gate) if self.fused else self.gate)(a, b))
