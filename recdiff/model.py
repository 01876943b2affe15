"""The Huginn recurrent-depth architecture: prelude P, core block R with input injection, coda C.

    e = P(x)                      embedding × embed_scale, then the prelude blocks
    s_i = R(e, s_{i-1})           adapter([s, e]) then the core blocks, i = 1 … r
    p = C(s_r)                    ln_f, coda blocks, ln_f, tied head

No sampling logic lives here: the engine (:mod:`recdiff.engine`) drives ``embed`` / ``core_step`` / ``decode`` for a
batch of sequences against a :class:`~recdiff.cache.SlotKV` cache, describing each call's rows and positions with a
:class:`~recdiff.cache.Call`. Without a call they run the plain no-cache pass (``forward``), used for parity checks
and training. Norms, RoPE, softmax and logits are computed in float32 whatever the weights' dtype.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recdiff import fused
from recdiff.cache import Call, SlotKV
from recdiff.config import RecurrentConfig

KV = tuple[SlotKV, Call, int, "int | Tensor"]  # cache, call, layer slot, recurrence step (per_step planes)


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


def rope_table(head_dim: int, length: int, base: float) -> Tensor:
    """``[1, length, 1, head_dim/2, 2]``: cos and sin of pos / base^(2i/head_dim)."""
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    ang = torch.outer(torch.arange(length, dtype=torch.float32), inv)
    return torch.stack([ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]], dim=4)


def apply_rope(q: Tensor, k: Tensor, freqs: Tensor, bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Rotate adjacent pairs (2i, 2i+1) of every head; q, k: ``(B, T, H, D)``, computed in float32; ``bias``
    (``(2, 1, H, D)``, Huginn's qk_bias) is added to q and k first."""
    if bias is not None:
        q, k = q + bias[0], k + bias[1]
    qk = torch.cat([q, k], dim=2).unflatten(-1, (-1, 2)).float()  # (B, T, Hq+Hk, D/2, 2)
    cos, sin = freqs[..., 0], freqs[..., 1]
    out = torch.stack([qk[..., 0] * cos - qk[..., 1] * sin, qk[..., 1] * cos + qk[..., 0] * sin], -1).flatten(3)
    return torch.split(out.type_as(q), q.shape[2], dim=2)  # type: ignore[return-value]


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
    fused = False  # q/k bias and RoPE in one kernel

    def __init__(self, cfg: RecurrentConfig) -> None:
        super().__init__()
        self.n_head, self.n_kv, self.hd = cfg.n_heads, cfg.num_key_value_heads, cfg.head_dim
        self.chunks = [cfg.n_embd, self.n_kv * self.hd, self.n_kv * self.hd]
        self.Wqkv = nn.Linear(cfg.n_embd, sum(self.chunks), bias=False)
        self.qk_bias = nn.Parameter(torch.zeros(2, 1, self.n_head, self.hd)) if cfg.qk_bias else None
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x: Tensor, freqs: Tensor, kv: KV | None) -> Tensor:
        B, T, E = x.shape
        q, k, v = self.Wqkv(x).split(self.chunks, dim=2)
        q = q.view(B, T, self.n_head, self.hd)
        k = k.view(B, T, self.n_kv, self.hd)
        v = v.view(B, T, self.n_kv, self.hd)
        q, k = (fused.compiled(apply_rope) if self.fused else apply_rope)(q, k, freqs, self.qk_bias)
        if kv is None:  # no cache: plain causal attention over the call's own positions
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H, T, D)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1, enable_gqa=self.n_kv != self.n_head)
        else:
            cache, call, slot, step = kv
            keys, values = cache.update(slot, call, k, v, step)  # (B, H, S, D)
            y = cached_attention(q.transpose(1, 2), keys, values, call.mask, self.n_kv != self.n_head)
        return self.proj(y.transpose(1, 2).reshape(B, T, E))


class GatedMLP(nn.Module):
    fused = False  # the SiLU gate in one kernel

    def __init__(self, cfg: RecurrentConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 2 * cfg.intermediate_size, bias=False)
        self.proj = nn.Linear(cfg.intermediate_size, cfg.n_embd, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        a, b = self.fc(x).chunk(2, dim=-1)
        return self.proj((fused.compiled(silu_gate) if self.fused else silu_gate)(a, b))


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


class RecurrentDepthModel(nn.Module):
    def __init__(self, config: RecurrentConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(c.padded_vocab_size, c.n_embd),
                prelude=nn.ModuleList(SandwichBlock(c) for _ in range(c.n_layers_in_prelude)),
                adapter=nn.Linear(2 * c.n_embd, c.n_embd, bias=c.bias),
                core_block=nn.ModuleList(SandwichBlock(c) for _ in range(c.n_layers_in_recurrent_block)),
                coda=nn.ModuleList(SandwichBlock(c) for _ in range(c.n_layers_in_coda)),
                ln_f=RMSNorm(c.n_embd, c.norm_eps),  # applied to the final state and again after the coda
            )
        )
        self.lm_head = nn.Linear(c.n_embd, c.padded_vocab_size, bias=False)
        if c.tie_embeddings:
            self.lm_head.weight = self.transformer.wte.weight
        self.register_buffer("freqs_cis", rope_table(c.head_dim, c.block_size, c.rope_base), persistent=False)
        self.tokenizer = None  # set by recdiff.load_model when the checkpoint folder has one
        self.engine_options: dict = {}  # set by recdiff.load_model(compile=...): how the engine runs this model

    def set_fused(self, on: bool) -> None:
        """Each layer's norms, RoPE and SiLU gate as one compiled kernel apiece (:mod:`recdiff.fused`), or plain."""
        for m in self.modules():
            if hasattr(type(m), "fused"):
                m.fused = on

    # ---------------------------------------------------------------------------------------------- weights
    @torch.no_grad()
    def init_weights(self, seed: int = 0) -> None:
        """Huginn's "takase" init: truncated normals, scaled-down output projections, unit norms."""
        g = torch.Generator(device=self.freqs_cis.device).manual_seed(seed)
        iv = self.config.init_values
        std, out = float(iv["std"]), float(iv["out_proj"])

        def tn(t: Tensor, s: float) -> None:
            t.copy_(torch.nn.init.trunc_normal_(torch.empty_like(t), std=s, a=-3 * s, b=3 * s, generator=g))

        for name, p in self.named_parameters():
            if "norm" in name or "ln_f" in name:
                p.fill_(1.0)
            elif "qk_bias" in name or name.endswith(".bias"):
                p.zero_()
            elif "wte" in name:
                tn(p, float(iv["embedding"]))
            elif "attn.proj" in name or "mlp.proj" in name:
                tn(p, out)
            elif "mlp.fc" in name:  # gate rows at std, value rows at the output scale, as the reference does
                half = p.shape[0] // 2
                tn(p[:half], std)
                tn(p[half:], out)
            else:
                tn(p, std)

    def initial_state(self, like: Tensor, init_scale: float, generator: torch.Generator | None = None) -> Tensor:
        """InitState(α): truncated normal with std α·σ_init within ±3 std (× embed scale); all zeros when α = 0."""
        std = float(self.config.init_values["std"]) * init_scale
        if std <= 0:
            return torch.zeros_like(like)
        x = torch.empty(like.shape, dtype=torch.float32, device=like.device)
        return (truncated_normal_(x, std, generator) * self.config.embed_scale).to(like.dtype)

    # ---------------------------------------------------------------------------------------------- P, R, C
    def _freqs(self, T: int, call: Call | None) -> Tensor:
        return self.freqs_cis[:, :T] if call is None else call.freqs

    def embed(self, ids: Tensor, call: Call | None = None, cache: SlotKV | None = None) -> Tensor:
        """P: token ids ``(B, T)`` → prelude output ``(B, T, E)``; with a call, its K/V go into ``cache``."""
        if call is not None and cache is not None and cache.depth is not None:
            cache.depth.index_put_((call.b_idx, call.pos), torch.zeros_like(call.pos, dtype=torch.int32))
        freqs = self._freqs(ids.shape[1], call)
        x = self.transformer.wte(ids) * self.config.embed_scale
        for i, block in enumerate(self.transformer.prelude):
            x = block(x, freqs, None if call is None else (cache, call, i, 0))
        return x

    def core_step(self, state: Tensor, embeds: Tensor, call: Call | None = None, cache: SlotKV | None = None,
                  step: int | Tensor = 0) -> Tensor:
        """R: one recurrence (adapter on [state, embeds], then the core blocks) for the call's positions.

        ``step`` (0-based recurrence index of these positions; a 0-d tensor inside compiled code) selects the cache
        plane under ``per_step``, where a key position that ran fewer than ``step + 1`` recurrences is left out (it
        has no entry for this step)."""
        freqs = self._freqs(state.shape[1], call)
        if call is not None and cache.depth is not None:
            first = call.pos[:, :1]  # keys before the call's first position that exited earlier are missing
            depth = cache.depth if call.rows is None else cache.depth.index_select(0, call.rows)
            depth = depth[:, : call.mask.shape[-1]]
            S = depth.shape[1]
            early = torch.arange(S, device=depth.device)[None, :] < first
            missing = early & (depth <= step)
            call = Call(call.rows, call.b_idx, call.pos, call.freqs, call.mask & ~missing[:, None, None, :], call.write)
        x = self.transformer.adapter(torch.cat([state, embeds], dim=-1))
        for i, block in enumerate(self.transformer.core_block):
            x = block(x, freqs, None if call is None else (cache, call, cache.core_slot(i), step))
        if call is not None and cache.depth is not None:
            new = torch.zeros_like(call.pos, dtype=torch.int32) + (step + 1)
            if call.write is not None:
                new = torch.where(call.write[:, None], new, cache.depth[call.b_idx, call.pos])
            cache.depth.index_put_((call.b_idx, call.pos), new)
        return x

    def decode(self, state: Tensor, call: Call | None = None, cache: SlotKV | None = None) -> Tensor:
        """C: raw states → float32 logits ``(B, T, V)``."""
        freqs = self._freqs(state.shape[1], call)
        x = self.transformer.ln_f(state)
        for i, block in enumerate(self.transformer.coda):
            x = block(x, freqs, None if call is None else (cache, call, cache.coda_slot(i), 0))
        return self.lm_head(self.transformer.ln_f(x)).float()

    # ---------------------------------------------------------------------------------------------- full passes
    def forward(self, ids: Tensor, r: int, init_scale: float = 0.0, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """No-cache forward at r recurrences → (logits, ln_f(final state)), as the reference's ``forward``."""
        e = self.embed(ids)
        s = self.initial_state(e, init_scale, generator)
        for i in range(r):
            s = self.core_step(s, e, step=i)
        return self.decode(s), self.transformer.ln_f(s)

    def forward_train(self, ids: Tensor, r_no_grad: int, r_grad: int, init_scale: float = 1.0) -> Tensor:
        """Training pass with truncated backpropagation: gradients flow through the last ``r_grad`` recurrences."""
        e = self.embed(ids)
        s = self.initial_state(e, init_scale)
        with torch.no_grad():
            for i in range(r_no_grad):
                s = self.core_step(s, e, step=i)
        for i in range(r_grad):
            s = self.core_step(s, e, step=r_no_grad + i)
        return self.decode(s)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @property
    def device(self) -> torch.device:
        return self.freqs_cis.device


def truncated_normal_(x: Tensor, std: float, generator: torch.Generator | None = None) -> Tensor:
    """Fill ``x`` with N(0, std²) draws truncated to ±3 std: the inverse normal CDF of uniform draws, the method of
    ``torch.nn.init.trunc_normal_`` up to torch 2.12. From 2.13 torch rejects and redraws, reading every draw's
    verdict back to the host (a device synchronisation inside a sampler step), and its draws differ."""
    lo = (1 + math.erf(-3 / math.sqrt(2))) / 2  # Φ(-3)
    x.uniform_(2 * lo - 1, 1 - 2 * lo, generator=generator)
    x.erfinv_()
    x.mul_(std * math.sqrt(2.0))
    return x.clamp_(min=-3 * std, max=3 * std)


def relative_change(new: Tensor, old: Tensor) -> Tensor:
    """δ = ‖new − old‖ / ‖new‖ per position (last dim), in float32 whatever the states' dtype."""
    new, old = new.float(), old.float()
    return (new - old).norm(dim=-1) / new.norm(dim=-1)


