"""Token-by-token decoding shared by the static and adaptive-compute samplers."""

from __future__ import annotations

import torch

from recdiff.model import relative_change
from recdiff.samplers.base import Context, GenerationResult


def run_ar(ctx: Context, r: int, init_scale: float, kv_cache: str, epsilon: float | None,
           exit_in_prefill: bool = True) -> GenerationResult:
    """Prefill the prompt, then one position per forward pass; ``epsilon`` set → adaptive exit per call."""
    m, L = ctx.model, ctx.prompt.shape[1]
    ctx.check_fits(L + ctx.max_new_tokens)
    cache = m.setup_cache(L + ctx.max_new_tokens, kv_cache, max_steps=r)
    ids, start = ctx.prompt, 0
    tokens: list[int] = []
    steps_per_token: list[int] = []
    core_passes = tokens_forward = 0
    stopped_by = "length"
    while len(tokens) < ctx.max_new_tokens:
        T = ids.shape[1]
        e = m.embed(ids, start)
        z = m.initial_state(e, init_scale, ctx.generator)
        steps = r
        exits = epsilon is not None and (start > 0 or exit_in_prefill)
        for k in range(r):
            z_prev = z
            z = m.core_step(z, e, start, k)
            core_passes += 1
            tokens_forward += T
            # the exit test needs the value on the host: one sync per recurrence, inherent to adaptive compute
            if exits and relative_change(z, z_prev).mean().item() < epsilon:
                steps = k + 1
                break
        steps_per_token.append(steps)
        logits = m.decode(z, start)[0, -1:]
        tok = int(ctx.select(logits)[0])
        tokens.append(tok)
        start += T
        cache.length = start
        stop = ctx.stop.first_stop(tokens, len(tokens) - 1)
        if stop:
            stopped_by = stop[1]
            break
        ids = torch.tensor([[tok]], device=ctx.prompt.device)
    stats = {
        "core_passes": core_passes,
        "tokens_forward": tokens_forward,
        "steps": len(steps_per_token),
        "new_tokens": len(tokens),
        "steps_per_token": steps_per_token,  # entry 0 is the prefill call
        "kv_cache_bytes": cache.nbytes(),
    }
    return GenerationResult(tokens=tokens, stats=stats, stopped_by=stopped_by)
