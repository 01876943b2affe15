"""A model's runners, kept on the model: one per shape, so compiled graphs, captured graphs and buffers are paid for
once per process, not per prompt."""

from __future__ import annotations

from recdiff.engine.runner import Runner
from recdiff.model import RecurrentDepthModel

PAD = 256  # positions past the block every runner has (the default wavefront, 128, plus its growth fits)
KEEP = 4  # runners kept per model: memory stays bounded when many shapes pass through one process


def cache_length(model: RecurrentDepthModel, pad: int = 0) -> int:
    """Positions per slot: the whole block, plus ``pad`` positions past it (rounded up to a power of two, at least
    ``PAD``) that only padding rows reach (a wavefront padded to its width, a draft past the last kept token).
    Every sampler of a model thus gets runners of the same length, which share their compiled graphs and buffers.
    Attention reads only the prefix of a slot that a call can see, so a long cache costs memory, not time; keys past
    a query's position are masked exactly (a longer cache gives bit-identical results)."""
    return model.config.block_size + max(PAD, 1 << max(pad - 1, 0).bit_length())


def call_length(longest: int, pad: int = 0) -> int:
    """Positions per slot for a call whose longest sequence is ``longest``, plus ``pad`` past it, for caches that keep
    a plane per recurrence (per-step, lanes): sized to the call, not the block (a plane of Huginn-0125's or Ouro's
    block per recurrence and layer at batch 32 would not fit a GPU). A power of two (at least 64) then ``pad``,
    rounded up to a multiple of 64, so that calls of similar lengths share a runner."""
    return -(-(max(64, 1 << (longest - 1).bit_length()) + pad) // 64) * 64


def get_runner(model: RecurrentDepthModel, slots: int, length: int, policy: str = "shared",
               max_steps: int = 1) -> Runner:
    """The kept runner of this shape: any of ``slots`` rows, ``policy`` and the model's compile option with room
    enough (at least ``length`` positions and ``max_steps`` cache planes); a new one otherwise."""
    steps = max_steps if policy in ("per_step", "lanes") else 1
    compile = bool(model.engine_options.get("compile"))
    runners = model.__dict__.setdefault("_runners", {})
    if compile:  # compiled pieces hold copies of the weights: weights changed in place or moved → compile anew
        stamp = tuple((p.data_ptr(), p._version) for p in model.parameters())
        if model.__dict__.get("_weights_stamp") != stamp:
            runners.clear()
            model.__dict__["_weights_stamp"] = stamp
    fits = [k for k in runners if k[0] == slots and k[2] == policy and k[3] >= steps and k[4:] == (compile,)
            and k[1] >= length]
    if fits:
        return runners[min(fits, key=lambda k: (k[1], k[3]))]
    key = (slots, length, policy, steps, compile)
    if len(runners) >= KEEP:
        runners.pop(next(iter(runners)))
    runners[key] = Runner(model, *key[:4])
    return runners[key]
