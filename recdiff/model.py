"""The recurrent-depth architecture: prelude P, core block R with input injection, coda C.

    e = P(x)                      embedding × embed_scale, then the prelude blocks
    s_i = R(e, s_{i-1})           adapter([s, e]) then the core blocks, i = 1 … r
    p = C(s_r)                    (ln_f,) coda blocks, ln_f, head

Parcae's core runs at its own width: s_0 has the core's width, its injection is the family's adapter (diagonal,
linear or additive), and a Linear ``transformer.C`` maps the final state to the coda's width; some of its layers add
value-embedding rows of each position's token to their values (in a cached call the token is read from the cache,
where P wrote it). A family without input injection (Ouro) loops all its layers with the embedding as the first
recurrence's input and ln_f closing each recurrence: s_1 = R(e), s_i = R(s_{i-1}), p = head(s_r); its exit gate gives
the probability of exiting at each recurrence.

The blocks, RoPE and whether ``ln_f`` also normalises the final state are the model family's
(:mod:`recdiff.families`, ``config.family``): Huginn, retrofitted Llama, retrofitted OLMo-2, Ouro, Parcae. The layers
they are built from are :mod:`recdiff.layers`.

No sampling logic lives here: the engine (:mod:`recdiff.engine`) drives ``embed`` / ``core_step`` / ``decode`` for a
batch of sequences against a :class:`~recdiff.cache.SlotKV` cache, describing each call's rows and positions with a
:class:`~recdiff.cache.Call`. Without a call they run the plain no-cache pass (``forward``), used for parity checks
and training. Norms, RoPE, softmax and logits are computed in float32 whatever the weights' dtype.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from recdiff.cache import Call, SlotKV
from recdiff.families import get_family
from recdiff.families.base import concat_adapter
from recdiff.layers import RMSNorm
from recdiff.layers import rope_table as rope_table  # Huginn's table, imported from here before recdiff.layers
from recdiff.model_config import RecurrentConfig
from recdiff.params import SamplerParams


class RecurrentDepthModel(nn.Module):
    def __init__(self, config: RecurrentConfig, rope: bool = True) -> None:
        """``rope=False``: no RoPE table (the module tree alone, as recognition compares weight names)."""
        super().__init__()
        self.config = config
        c = config
        family = get_family(c.family)
        layer = family.layer or (lambda cfg, part, i: family.block(cfg.core_config() if part == "core" else cfg))
        modules = dict(
            wte=embedding(c.padded_vocab_size, c.n_embd),
            prelude=nn.ModuleList(layer(c, "prelude", i) for i in range(c.n_layers_in_prelude)),
            core_block=nn.ModuleList(layer(c, "core", i) for i in range(c.n_layers_in_recurrent_block)),
            coda=nn.ModuleList(layer(c, "coda", i) for i in range(c.n_layers_in_coda)),
            ln_f=RMSNorm(c.n_embd, c.norm_eps),  # after the coda (Huginn: on the final state too; Ouro: every loop)
        )
        if family.injection:
            modules["adapter"] = (family.adapter or concat_adapter)(c)
        if family.project_state:  # the final state (the core's width) → the coda's
            modules["C"] = nn.Linear(c.state_width, c.n_embd, bias=c.bias)
        if c.prelude_norm:
            modules["ln_prelude"] = RMSNorm(c.n_embd, c.norm_eps)
        self.transformer = nn.ModuleDict(modules)
        self.lm_head = nn.Linear(c.n_embd, c.padded_vocab_size, bias=False)
        if c.tie_embeddings:
            self.lm_head.weight = self.transformer.wte.weight
        # value embeddings: token tables added to some attention layers' values (Parcae); ve_use: (part, layer) →
        # the table it reads
        tables, self.ve_use = family.value_embeddings(c) if family.value_embeddings else ({}, {})
        self.value_embeds = nn.ModuleDict({str(i): embedding(c.padded_vocab_size, w) for i, w in tables.items()}) \
            if tables else None
        self.exit_gate = nn.Linear(c.n_embd, 1, bias=True) if family.exit_gate else None
        self.ln_f_on_state = family.ln_f_on_state
        self.injection, self.loop_norm = family.injection, family.loop_norm
        here = torch.get_default_device()  # the enclosing ``with torch.device(...)``'s, else the CPU
        with torch.device("cpu"):  # as recdiff.load_model computes it (and on meta, a table's arange would import
            # torch._dynamo: about 3 s of every process's start-up)
            table = family.table(c, c.block_size) if rope else torch.zeros(1, 0, 1, c.head_dim // 2, 2)
        self.register_buffer("freqs_cis", table.to(here), persistent=False)
        self.tokenizer = None  # set by recdiff.load_model when the checkpoint folder has one
        self.engine_options: dict = {}  # set by recdiff.load_model(compile=...): how the engine runs this model

    def rope_table(self, length: int, device: torch.device | str | None = None) -> Tensor:
        """The family's RoPE table for positions 0 … length − 1 (``[1, length, 1, head_dim/2, 2]``: cos, sin), on
        ``device`` (default: the model's)."""
        return get_family(self.config.family).table(self.config, length).to(device or self.device)

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
        """InitState(α): truncated normal with std α·σ_init within ±3 std (× embed scale); all zeros when α = 0 (and
        always without input injection: there the first recurrence reads the embedding, :meth:`refuses`)."""
        shape = (*like.shape[:-1], self.config.state_width)  # ``like``: the embedding's or a state's rows
        std = float(self.config.init_values["std"]) * init_scale
        if std <= 0 or not self.injection:
            return torch.zeros(shape, dtype=like.dtype, device=like.device)
        x = torch.empty(shape, dtype=torch.float32, device=like.device)
        return (truncated_normal_(x, std, generator) * self.config.embed_scale).to(like.dtype)

    # ---------------------------------------------------------------------------------------------- P, R, C
    def _freqs(self, T: int, call: Call | None) -> Tensor:
        return self.freqs_cis[:, :T] if call is None else call.freqs

    def embed(self, ids: Tensor, call: Call | None = None, cache: SlotKV | None = None) -> Tensor:
        """P: token ids ``(B, T)`` → prelude output ``(B, T, E)``; with a call, its K/V go into ``cache``."""
        if call is not None and cache is not None and cache.depth is not None:
            cache.depth.index_put_((call.b_idx, call.pos), torch.zeros_like(call.pos, dtype=torch.int32))
        freqs = self._freqs(ids.shape[1], call)
        if call is not None and cache is not None and cache.tokens is not None:  # what later layers' tables read
            index = (call.b_idx, call.where)
            new = ids if call.write is None else torch.where(call.write[:, None], ids, cache.tokens[index])
            cache.tokens.index_put_(index, new)
        x = self.transformer.wte(ids) * self.config.embed_scale
        for i, block in enumerate(self.transformer.prelude):
            x = block(x, freqs, None if call is None else (cache, call, i, 0), *self._ve("prelude", i, ids))
        if self.config.prelude_norm:
            x = self.transformer.ln_prelude(x)
        return x

    def _ve(self, part: str, i: int, tokens: Tensor | None) -> tuple[Tensor, ...]:
        """The value-embedding rows layer (part, i) adds to its values, as a block's extra argument (none: it
        uses none)."""
        table = self.ve_use.get((part, i))
        if table is None:
            return ()
        if tokens is None:
            raise ValueError("value embeddings need the positions' tokens: a call into a cache, or tokens=")
        return (self.value_embeds[str(table)](tokens),)

    @staticmethod
    def _tokens(call: Call | None, cache: SlotKV | None, tokens: Tensor | None) -> Tensor | None:
        """The call's positions' tokens (written by :meth:`embed` into the cache), else ``tokens``."""
        if call is None or cache is None or cache.tokens is None:
            return tokens
        return cache.tokens[call.b_idx, call.where]

    def core_step(self, state: Tensor, embeds: Tensor, call: Call | None = None, cache: SlotKV | None = None,
                  step: int | Tensor = 0, tokens: Tensor | None = None) -> Tensor:
        """R: one recurrence (adapter on [state, embeds], then the core blocks) for the call's positions.

        ``step`` (0-based recurrence index of these positions; a 0-d tensor inside compiled code) selects the cache
        plane under ``per_step``, where a key position that ran fewer than ``step + 1`` recurrences is left out (it
        has no entry for this step). ``tokens``: the positions' tokens, for value embeddings without a call."""
        freqs = self._freqs(state.shape[1], call)
        tokens = self._tokens(call, cache, tokens) if self.ve_use else None
        if call is not None and cache.depth is not None:
            first = call.pos[:, :1]  # keys before the call's first position that exited earlier are missing
            depth = cache.depth if call.rows is None else cache.depth.index_select(0, call.rows)
            depth = depth[:, : call.mask.shape[-1]]
            S = depth.shape[1]
            early = torch.arange(S, device=depth.device)[None, :] < first
            missing = early & (depth <= step)
            call = Call(call.rows, call.b_idx, call.pos, call.freqs, call.mask & ~missing[:, None, None, :], call.write)
        if self.injection:
            x = self.transformer.adapter(state, embeds)
        else:  # the embedding enters once: a state not yet recurred (all zeros: no normed state is) reads it
            x = torch.where(state.abs().amax(-1, keepdim=True) == 0, embeds, state)
        for i, block in enumerate(self.transformer.core_block):
            x = block(x, freqs, None if call is None else (cache, call, cache.core_slot(i), step),
                      *self._ve("core", i, tokens))
        if self.loop_norm:
            x = self.transformer.ln_f(x)
        if call is not None and cache.depth is not None:
            new = torch.zeros_like(call.pos, dtype=torch.int32) + (step + 1)
            if call.write is not None:
                new = torch.where(call.write[:, None], new, cache.depth[call.b_idx, call.pos])
            cache.depth.index_put_((call.b_idx, call.pos), new)
        return x

    def decode(self, state: Tensor, call: Call | None = None, cache: SlotKV | None = None,
               float32: bool = True, plane: int | Tensor = 0, tokens: Tensor | None = None) -> Tensor:
        """C: raw states → float32 logits ``(B, T, V)`` (``float32=False``: in the model's dtype, which converts to
        float32 exactly; what a buffer of many rows' logits holds at half the memory). ``plane``: the coda's K/V
        plane in a cache with one per readout depth (``lanes``; per row, a ``(B,)`` tensor)."""
        freqs = self._freqs(state.shape[1], call)
        tokens = self._tokens(call, cache, tokens) if self.ve_use else None
        x = self.transformer.ln_f(state) if self.ln_f_on_state else state
        if "C" in self.transformer:
            x = self.transformer.C(x)
        for i, block in enumerate(self.transformer.coda):
            x = block(x, freqs, None if call is None else (cache, call, cache.coda_slot(i), plane),
                      *self._ve("coda", i, tokens))
        logits = self.lm_head(x if self.loop_norm else self.transformer.ln_f(x))
        scale, cap = self.config.logit_scale, self.config.logit_softcap
        if scale != 1 or cap is not None:  # in float32, as the reference scales them
            scaled = logits.float() * scale
            scaled = scaled if cap is None else cap * torch.tanh(scaled / cap)
            return scaled if float32 else scaled.to(logits.dtype)
        return logits.float() if float32 else logits

    # ---------------------------------------------------------------------------------------------- full passes
    def forward(self, ids: Tensor, r: int, init_scale: float = 0.0,
                generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """No-cache forward at r recurrences → (logits, the state the coda reads: ln_f(final state) for Huginn, the
        final state itself for the retrofitted families), as the reference's ``forward`` returns ``latent_states``."""
        e = self.embed(ids)
        s = self.initial_state(e, init_scale, generator)
        for i in range(r):
            s = self.core_step(s, e, step=i, tokens=ids)
        return self.decode(s, tokens=ids), self.transformer.ln_f(s) if self.ln_f_on_state else s

    def forward_train(self, ids: Tensor, r_no_grad: int, r_grad: int, init_scale: float = 1.0) -> Tensor:
        """Training pass with truncated backpropagation: gradients flow through the last ``r_grad`` recurrences."""
        e = self.embed(ids)
        s = self.initial_state(e, init_scale)
        with torch.no_grad():
            for i in range(r_no_grad):
                s = self.core_step(s, e, step=i, tokens=ids)
        for i in range(r_grad):
            s = self.core_step(s, e, step=r_no_grad + i, tokens=ids)
        return self.decode(s, tokens=ids)

    def exit_probability(self, state: Tensor) -> Tensor:
        """λ = σ(gate(state)) ``(B, T)`` in float32: the probability of exiting at this recurrence, given that no
        earlier one was exited at (models with an exit gate)."""
        return torch.sigmoid(self.exit_gate(state).float())[..., 0]

    def refuses(self, p: SamplerParams) -> str | None:
        """Why this model cannot run a sampler with the parameters ``p`` (None: it can): a family's loop decides
        what a sampler's settings mean on it."""
        if not self.injection:
            family = self.config.family
            if p.init_scale:
                return (f"init_scale={p.init_scale} on a {family} model: its loop has no initial state to "
                        "draw (the embedding enters as the first recurrence's input); use init_scale=0")
            if p.name == "diffusion":
                return (f"the diffusion sampler needs input injection, which a {family} model has not: a position "
                        "whose token changes never sees its new embedding after its first recurrence "
                        "(docs/samplers.md, \"On models without input injection\")")
        if getattr(p, "exit_threshold", None) is not None and self.exit_gate is None:
            return f"exit_threshold needs an exit gate, which a {self.config.family} model has not (use epsilon)"
        return None

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @property
    def device(self) -> torch.device:
        return self.freqs_cis.device


def embedding(num: int, dim: int) -> nn.Embedding:
    """``nn.Embedding(num, dim)``; on the meta device (a checkpoint's skeleton, before its weights load) without the
    default normal draw, which on meta tensors imports ``torch._dynamo`` (about 3 s of start-up in every process)."""
    if torch.get_default_device().type == "meta":  # the enclosing ``with torch.device(...)``'s
        return nn.Embedding(num, dim, _weight=torch.empty(num, dim))
    return nn.Embedding(num, dim)


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


