"""Model configuration, read from and written to the ``config.json`` field names of the reference implementations.

The fields are Huginn's (``n_embd``, ``n_heads``, ``rope_base``, ...) plus what the retrofitted families add
(``head_dim``, ``rope_theta``, ``rope_scaling``, ``max_position_embeddings``); ``family`` names the model family
(:mod:`recdiff.families`), which decides how a ``config.json`` is read and written.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from recdiff.errors import RecdiffError

# Fields without a default must be present in every config.json we load.
_REQUIRED = (
    "n_embd",
    "n_heads",
    "n_layers_in_prelude",
    "n_layers_in_recurrent_block",
    "n_layers_in_coda",
    "intermediate_size",
    "vocab_size",
    "block_size",
)


@dataclass
class RecurrentConfig:
    n_embd: int
    n_heads: int
    n_layers_in_prelude: int
    n_layers_in_recurrent_block: int
    n_layers_in_coda: int
    intermediate_size: int
    vocab_size: int
    block_size: int
    num_key_value_heads: int | None = None
    padded_vocab_size: int | None = None
    tie_embeddings: bool = True
    qk_bias: bool = True
    bias: bool = False
    mean_recurrence: int = 32
    mean_backprop_depth: int = 8
    rope_base: float = 50000.0
    norm_eps: float = 1e-6
    init_values: dict[str, float] = field(default_factory=dict)
    # Token ids that end generation (Huginn: <|begin_text|>, <|end_text|>, <|end_turn|>); config.json may set them.
    eos_token_id: int | list[int] | None = None
    family: str = "huginn"                    # recdiff.families: the block, RoPE and norms; never in config.json
    head_dim: int | None = None               # None: n_embd // n_heads
    # Hugging Face RoPE (the retrofitted families; Huginn reads rope_base)
    rope_theta: float | None = None
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int | None = None
    # a core of its own width (Parcae): the recurrent state's width, the core's heads (all of them K/V heads) and MLP
    # width; None: the outer model's. Its head width must be the outer one (one RoPE table serves every layer).
    core_n_embd: int | None = None
    core_n_heads: int | None = None
    core_intermediate_size: int | None = None
    prelude_norm: bool = False                # a norm on the prelude's output (Parcae: ln_prelude)
    logit_scale: float = 1.0                  # logits = head(x) · logit_scale (Parcae's init strategy sets it)
    logit_softcap: float | None = None        # logits = c · tanh(logits / c)
    # what only one family reads (Parcae: its injection, MLP, nonlinearity, qk_norm, RoPE condensing, value
    # embeddings' layers); never in config.json as such: the family writes its own keys
    family_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.n_heads
        if self.padded_vocab_size is None:
            self.padded_vocab_size = self.vocab_size
        if self.head_dim is None:
            if self.n_embd % self.n_heads:
                raise RecdiffError(f"config: n_embd={self.n_embd} is not divisible by n_heads={self.n_heads}")
            self.head_dim = self.n_embd // self.n_heads
        if self.n_heads % self.num_key_value_heads:
            raise RecdiffError(
                f"config: n_heads={self.n_heads} is not a multiple of num_key_value_heads={self.num_key_value_heads}"
            )
        if self.core_n_embd is not None or self.core_n_heads is not None:
            width, heads = self.state_width, self.core_n_heads or self.n_heads
            if width % heads or width // heads != self.head_dim:
                raise RecdiffError(f"config: a core {width} wide with {heads} heads has heads {width / heads:g} wide, "
                                   f"the outer layers' are {self.head_dim} (one RoPE table serves both)")
        for name in ("n_embd", "n_heads", "head_dim", "n_layers_in_recurrent_block", "intermediate_size", "vocab_size",
                     "block_size"):
            if getattr(self, name) < 1:
                raise RecdiffError(f"config: {name} must be positive, got {getattr(self, name)}")
        # Huginn's "takase" initialisation constants; config.json stores them, fall back to the formulas.
        d = self.n_embd
        std = math.sqrt(2 / (5 * d))
        defaults = {
            "std": std,
            "embedding": std,
            "out_proj": std / math.sqrt(2 * self.effective_expected_depth),
            "embed_scale": math.sqrt(d),
        }
        self.init_values = {**defaults, **(self.init_values or {})}

    @property
    def n_layers(self) -> int:
        return self.n_layers_in_prelude + self.n_layers_in_recurrent_block + self.n_layers_in_coda

    @property
    def state_width(self) -> int:
        """The recurrent state's width: the core's (``core_n_embd``), else ``n_embd``."""
        return self.core_n_embd or self.n_embd

    def core_config(self) -> "RecurrentConfig":
        """The config the core's blocks are built from: the core's width, heads (K/V heads as many) and MLP width."""
        if self.core_n_embd is None and self.core_n_heads is None and self.core_intermediate_size is None:
            return self
        heads = self.core_n_heads or self.n_heads
        return dataclasses.replace(self, n_embd=self.state_width, n_heads=heads, num_key_value_heads=heads,
                                   intermediate_size=self.core_intermediate_size or self.intermediate_size,
                                   core_n_embd=None, core_n_heads=None, core_intermediate_size=None)

    @property
    def effective_expected_depth(self) -> int:
        return (self.n_layers_in_prelude + self.n_layers_in_coda
                + self.n_layers_in_recurrent_block * self.mean_recurrence)

    @property
    def embed_scale(self) -> float:
        return float(self.init_values["embed_scale"])

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "config") -> "RecurrentConfig":
        missing = [k for k in _REQUIRED if k not in d]
        if missing:
            raise RecdiffError(f"{source}: missing required keys {', '.join(missing)}")
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in names}
        for k in _REQUIRED:
            if not isinstance(kwargs[k], int) or isinstance(kwargs[k], bool):
                raise RecdiffError(f"{source}: {k} must be an integer, got {kwargs[k]!r}")
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """Our fields (those set), with the derived ``n_layers`` and ``effective_expected_depth`` the reference reads;
        the family's own keys are added by :func:`recdiff.families.config_json`."""
        d = dataclasses.asdict(self)
        del d["family"]
        for k in ("eos_token_id", "rope_theta", "rope_scaling", "max_position_embeddings", "core_n_embd",
                  "core_n_heads", "core_intermediate_size", "logit_softcap"):
            if d[k] is None:
                del d[k]
        for k, default in (("prelude_norm", False), ("logit_scale", 1.0), ("family_options", {})):
            if d[k] == default:
                del d[k]
        d.update(n_layers=self.n_layers, effective_expected_depth=self.effective_expected_depth)
        return d
