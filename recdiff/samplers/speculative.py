"""Self-speculative decoding: draft ``lookahead`` tokens with r_draft recurrences each, verify them in one
parallel pass at r, keep the agreeing prefix plus the verifier's token at the first disagreement.

As in the authors' reference, a draft is accepted where it equals the verifier's argmax; when every draft
token is accepted no bonus token is added (the verifier has no logits past the last draft). Under sampling the
drafts and the correction token are sampled, the acceptance test stays the argmax comparison.
"""

from __future__ import annotations

import torch

from recdiff.samplers.base import Context, GenerationResult, non_negative, one_of, positive_int, validate

SPEC = {
    "r": (32, positive_int),
    "r_draft": (4, positive_int),
    "lookahead": (4, positive_int),
    "init_scale": (0.0, non_negative),
    "kv_cache": ("shared", one_of("shared", "per_step")),
}


def generate(ctx: Context, params: dict) -> GenerationResult:
    p = validate("speculative", params, SPEC)
    r, r_draft, look, alpha = p["r"], p["r_draft"], p["lookahead"], p["init_scale"]
    m, L, dev = ctx.model, ctx.prompt.shape[1], ctx.prompt.device
    ctx.check_fits(L + ctx.max_new_tokens)
    # drafting may run up to lookahead positions past the last kept token
    cache = m.setup_cache(min(L + ctx.max_new_tokens + look, m.config.block_size), p["kv_cache"], max_steps=max(r, r_draft))
    counters = {"core_passes": 0, "tokens_forward": 0}

    def forward(ids: torch.Tensor, start: int, depth: int) -> torch.Tensor:
        e = m.embed(ids, start)
        z = m.initial_state(e, alpha, ctx.generator)
        for k in range(depth):
            z = m.core_step(z, e, start, k)
        counters["core_passes"] += depth
        counters["tokens_forward"] += depth * ids.shape[1]
        return m.decode(z, start)[0]  # (T, V)

    tokens = [int(ctx.select(forward(ctx.prompt, 0, r)[-1:])[0])]
    committed = L  # positions whose K/V are final; tokens[-1] sits at position `committed`, not yet processed
    accepted: list[int] = []
    stopped_by = "length"
    stop = ctx.stop.first_stop(tokens, 0)
    while stop is None and len(tokens) < ctx.max_new_tokens:
        draft: list[int] = []
        last = tokens[-1]
        for j in range(look):
            if committed + j >= cache.max_len:
                break
            last = int(ctx.select(forward(torch.tensor([[last]], device=dev), committed + j, r_draft)[-1:])[0])
            draft.append(last)
        # verify: positions committed … committed+len(draft)-1 hold tokens[-1], draft[:-1]; they predict the drafts
        ids = torch.tensor([[tokens[-1], *draft[:-1]]], device=dev)
        logits = forward(ids, committed, r)
        verified = logits.argmax(-1).tolist()
        n_ok = next((i for i, (a, b) in enumerate(zip(verified, draft)) if a != b), len(draft))
        new = draft[:n_ok]
        if n_ok < len(draft) or not draft:  # (no draft only where the block size ends the sequence)
            new.append(int(ctx.select(logits[n_ok : n_ok + 1])[0]))
        accepted.append(n_ok)
        committed += len(new)  # the K/V written for rejected positions are beyond the pointer and get overwritten
        cache.length = committed
        before = len(tokens)
        tokens.extend(new)
        stop = ctx.stop.first_stop(tokens, before)
    if stop:
        tokens, stopped_by = tokens[: stop[0]], stop[1]
    tokens = tokens[: ctx.max_new_tokens]
    stats = {
        **counters,
        "steps": 1 + len(accepted) * 2,  # forward calls: prefill, then a draft phase and a verify pass per round
        "rounds": len(accepted),
        "accepted_per_round": accepted,
        "new_tokens": len(tokens),
        "kv_cache_bytes": cache.nbytes(),
    }
    return GenerationResult(tokens=tokens, stats=stats, stopped_by=stopped_by)
