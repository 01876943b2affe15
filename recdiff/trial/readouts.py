"""A LoopSpec trial's readout statistics over its slice, recorded as user attributes: how often each early readout
proposed the token the full-depth readout committed, how long a token waited, how wide the lanes grew.

Each is pooled over the problems as ``core_passes_per_token`` is (sums over the slice, one division), never a mean of
per-problem ratios. A problem's acceptance k/n is taken apart again: k is counted from the sampler's ``accepted`` (per
committed token after the first: 1 q1's proposal was right, 2 q2's, 0 neither), n is k over the ratio. A ratio of 0
does not hold n; it is then the most it can be, the tokens no proposal got right (q1 verifies every committed token
after the first, so for q1 that is exact), so that a pooled acceptance is never flattering.
"""

from __future__ import annotations

from typing import Any

# readout → (its key in the sampler's stats, its value in ``accepted``)
READOUTS = {"q1_acceptance": 1, "q2_acceptance": 2}


def verifications(k: int, ratio: float | None, most: int) -> int:
    """The n of a problem's acceptance ``ratio`` = k/n: none when the ratio is None (nothing was verified)."""
    if ratio is None:
        return 0
    return round(k / ratio) if k else most


def readout_attrs(stats: list[dict[str, Any]]) -> dict[str, Any]:
    """``q1_acceptance``, ``q2_acceptance`` (None where no such verification happened), ``sequential_per_token``
    (recurrences a token waited for after the first) and ``peak_lanes`` (the most) of a LoopSpec trial's results."""
    out: dict[str, Any] = {}
    for key, which in READOUTS.items():
        k = n = 0
        for s in stats:
            accepted = s["accepted"]
            k_i = accepted.count(which)
            most = len(accepted) if which == 1 else accepted.count(0)
            k, n = k + k_i, n + verifications(k_i, s[key], most)
        out[key] = k / n if n else None
    # a problem's per-token figure is over its committed tokens after the first (at least one)
    decoded = [max(int(s["new_tokens"]) - 1, 1) for s in stats]
    waited = sum(s["sequential_per_token"] * d for s, d in zip(stats, decoded))
    out["sequential_per_token"] = waited / sum(decoded) if stats else None
    out["peak_lanes"] = max((int(s["peak_lanes"]) for s in stats), default=None)
    return out
