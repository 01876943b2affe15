"""The Huginn recurrent-depth architecture: prelude P, core block R with input injection, coda C.

    e = P(x)                      embedding × embed_scale, then the prelude blocks
    s_i = R(e, s_{i-1})           adapter([s, e]) then the core blocks, i = 1 … r
    p = C(s_r)                    ln_f, coda blocks, ln_f, tied head

No sampling logic lives here: samplers drive ``embed`` / ``core_step`` / ``decode`` against the model's KV cache
(``setup_cache``). ``forward`` is the plain no-cache pass used for parity checks and training.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recdiff.cache import CachePolicy, KVCache
from recdiff.config import RecurrentConfig


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()  # normalise in float32 whatever the weights' dtype
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope_table(head_dim: int, length: int, base: float) -> Tensor:
    """``[1, length, 1, head_dim/2, 2]``: cos and sin of pos / base^(2i/head_dim)."""
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    ang = torch.outer(torch.arange(length, dtype=torch.float32), inv)
    return torch.stack([ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]], dim=4)


def apply_rope(q: Tensor, k: Tensor, freqs: Tensor) -> tuple[Tensor, Tensor]:
    """Rotate adjacent pairs (2i, 2i+1) of every head; q, k: ``(B, T, H, D)``, computed in float32."""
    qk = torch.cat([q, k], dim=2).unflatten(-1, (-1, 2)).float()  # (B, T, Hq+Hk, D/2, 2)
    cos, sin = freqs[..., 0], freqs[..., 1]
    out = torch.stack([qk[..., 0] * cos - qk[..., 1] * sin, qk[..., 1] * cos + qk[..., 0] * sin], -1).flatten(3)
    return torch.split(out.type_as(q), q.shape[2], dim=2)  # type: ignore[return-value]


class Attention(nn.Module):
    def __init__(self, cfg: RecurrentConfig) -> None:
        super().__init__()
        self.n_head, self.n_kv, self.hd = cfg.n_heads, cfg.num_key_value_heads, cfg.head_dim
        self.chunks = [cfg.n_embd, self.n_kv * self.hd, self.n_kv * self.hd]
        self.Wqkv = nn.Linear(cfg.n_embd, sum(self.chunks), bias=False)
        self.qk_bias = nn.Parameter(torch.zeros(2, 1, self.n_head, self.hd)) if cfg.qk_bias else None
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x: Tensor, freqs: Tensor, mask: Tensor | None, cache: KVCache | None, slot: int, start: int) -> Tensor:
        B, T, E = x.shape
        q, k, v = self.Wqkv(x).split(self.chunks, dim=2)
        q = q.view(B, T, self.n_head, self.hd)
        k = k.view(B, T, self.n_kv, self.hd)
        v = v.view(B, T, self.n_kv, self.hd)
        if self.qk_bias is not None:
            q, k = q + self.qk_bias[0], k + self.qk_bias[1]  # per head, before RoPE
        q, k = apply_rope(q, k, freqs)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H, T, D)
        if cache is not None:
            k, v = cache.write(slot, start, k, v)  # (B, H, start+T, D)
        causal = mask is None and k.shape[2] == T and T > 1
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=self.n_kv != self.n_head)
        return self.proj(y.transpose(1, 2).reshape(B, T, E))


class GatedMLP(nn.Module):
    def __init__(self, cfg: RecurrentConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 2 * cfg.intermediate_size, bias=False)
        self.proj = nn.Linear(cfg.intermediate_size, cfg.n_embd, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        a, b = self.fc(x).chunk(2, dim=-1)
        return self.proj(F.silu(a) * b)


class SandwichBlock(nn.Module):
    def __init__(self, cfg: RecurrentConfig) -> None:
        super().__init__()
        self.norm_1 = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.norm_2 = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.mlp = GatedMLP(cfg)
        self.norm_3 = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.norm_4 = RMSNorm(cfg.n_embd, cfg.norm_eps)

    def forward(self, x: Tensor, freqs: Tensor, mask: Tensor | None, cache: KVCache | None, slot: int, start: int) -> Tensor:
        x = self.norm_2(self.attn(self.norm_1(x), freqs, mask, cache, slot, start) + x)
        return self.norm_4(self.mlp(self.norm_3(x)) + x)


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
        self.cache: KVCache | None = None
        self.tokenizer = None  # set by recdiff.load_model when the checkpoint folder has one
        self._mask_key: tuple[int, int] | None = None
        self._mask: Tensor | None = None

    # ---------------------------------------------------------------------------------------------- weights
    @torch.no_grad()
    def init_weights(self, seed: int = 0) -> None:
        """Huginn's "takase" init: truncated normals, scaled-down output projections, unit norms."""
        g = torch.Generator().manual_seed(seed)
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
        """InitState(α): truncated normal with std α·σ_init (× embed scale); all zeros when α = 0."""
        std = float(self.config.init_values["std"]) * init_scale
        if std <= 0:
            return torch.zeros_like(like)
        x = torch.empty(like.shape, dtype=torch.float32, device=like.device)
        torch.nn.init.trunc_normal_(x, std=std, a=-3 * std, b=3 * std, generator=generator)
        return (x * self.config.embed_scale).to(like.dtype)

    # ---------------------------------------------------------------------------------------------- cache
    def setup_cache(self, max_len: int, policy: CachePolicy = "shared", max_steps: int = 1) -> KVCache:
        p = next(self.parameters())
        self.cache = KVCache(self.config, max_len, policy, max_steps, device=p.device, dtype=p.dtype)
        self._mask_key = None
        return self.cache

    def _attn_mask(self, start: int, T: int, missing: np.ndarray | None = None) -> Tensor | None:
        """Causal mask for queries at start … start+T-1 over keys 0 … start+T-1 (None where SDPA needs none)."""
        if missing is None:
            if start == 0 or T == 1:
                return None  # plain causal (start == 0) or a single query that may see everything
            if self._mask_key != (start, T):
                q = torch.arange(start, start + T, device=self.freqs_cis.device)[:, None]
                self._mask = torch.arange(start + T, device=self.freqs_cis.device)[None, :] <= q
                self._mask_key = (start, T)
            return self._mask
        q = torch.arange(start, start + T)[:, None]
        allowed = torch.arange(start + T)[None, :] <= q
        allowed[:, :start] &= torch.from_numpy(~missing)[None, :]
        return allowed.to(self.freqs_cis.device)

    def _freqs(self, start: int, T: int) -> Tensor:
        return self.freqs_cis[:, start : start + T]

    # ---------------------------------------------------------------------------------------------- P, R, C
    def embed(self, ids: Tensor, start: int = 0, use_cache: bool = True) -> Tensor:
        """P: token ids ``(B, T)`` at positions start … start+T-1 → prelude output ``(B, T, E)``."""
        cache = self.cache if use_cache else None
        T = ids.shape[1]
        if cache is not None and cache.depth is not None:
            cache.depth[start : start + T] = 0  # these positions are (re)written from scratch
        freqs, mask = self._freqs(start, T), self._attn_mask(start, T) if cache is not None else None
        x = self.transformer.wte(ids) * self.config.embed_scale
        for i, block in enumerate(self.transformer.prelude):
            x = block(x, freqs, mask, cache, i, start)
        return x

    def core_step(self, state: Tensor, embeds: Tensor, start: int = 0, step: int = 0, use_cache: bool = True) -> Tensor:
        """R: one recurrence (adapter on [state, embeds], then the core blocks) for positions start … start+T-1.

        ``step`` (0-based recurrence index of these positions) selects the cache slots under ``per_step``.
        """
        cache = self.cache if use_cache else None
        T = state.shape[1]
        freqs = self._freqs(start, T)
        mask = None
        if cache is not None:
            mask = self._attn_mask(start, T, cache.missing_at_step(step, start))
        x = self.transformer.adapter(torch.cat([state, embeds], dim=-1))
        for i, block in enumerate(self.transformer.core_block):
            slot = cache.core_slot(step, i) if cache is not None else 0
            x = block(x, freqs, mask, cache, slot, start)
        if cache is not None and cache.depth is not None:
            cache.depth[start : start + T] = step + 1
        return x

    def decode(self, state: Tensor, start: int = 0, use_cache: bool = True) -> Tensor:
        """C: raw states → float32 logits ``(B, T, V)``."""
        cache = self.cache if use_cache else None
        T = state.shape[1]
        freqs, mask = self._freqs(start, T), self._attn_mask(start, T) if cache is not None else None
        x = self.transformer.ln_f(state)
        for i, block in enumerate(self.transformer.coda):
            x = block(x, freqs, mask, cache, cache.coda_slot(i) if cache is not None else 0, start)
        return self.lm_head(self.transformer.ln_f(x)).float()

    # ---------------------------------------------------------------------------------------------- full passes
    def forward(self, ids: Tensor, r: int, init_scale: float = 0.0, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """No-cache forward at r recurrences → (logits, ln_f(final state)), as the reference's ``forward``."""
        e = self.embed(ids, use_cache=False)
        s = self.initial_state(e, init_scale, generator)
        for i in range(r):
            s = self.core_step(s, e, step=i, use_cache=False)
        return self.decode(s, use_cache=False), self.transformer.ln_f(s)

    def forward_train(self, ids: Tensor, r_no_grad: int, r_grad: int, init_scale: float = 1.0) -> Tensor:
        """Training pass with truncated backpropagation: gradients flow through the last ``r_grad`` recurrences."""
        e = self.embed(ids, use_cache=False)
        s = self.initial_state(e, init_scale)
        with torch.no_grad():
            for i in range(r_no_grad):
                s = self.core_step(s, e, step=i, use_cache=False)
        for i in range(r_grad):
            s = self.core_step(s, e, step=r_no_grad + i, use_cache=False)
        return self.decode(s, use_cache=False)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @property
    def device(self) -> torch.device:
        return self.freqs_cis.device


def relative_change(new: Tensor, old: Tensor) -> Tensor:
    """δ = ‖new − old‖ / ‖new‖ per position (last dim)."""
    return (new - old).norm(dim=-1) / new.norm(dim=-1)


