"""Accuracy with uncertainty for small slices: Wilson score interval (and a bootstrap alternative)."""

from __future__ import annotations

import math
import random
from typing import Iterable


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for ``k`` successes out of ``n`` (95% for z=1.96); (0, 1) when n == 0."""
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # Clamp float noise: the exact interval contains 0 when k == 0 and 1 when k == n.
    return max(0.0, centre - half) if k else 0.0, min(1.0, centre + half) if k < n else 1.0


def bootstrap_interval(outcomes: Iterable[bool], n_boot: int = 2000, alpha: float = 0.05,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of 0/1 outcomes."""
    xs = [1.0 if x else 0.0 for x in outcomes]
    if not xs:
        return 0.0, 1.0
    rng = random.Random(seed)
    n = len(xs)
    means = sorted(sum(rng.choices(xs, k=n)) / n for _ in range(n_boot))
    return means[int(alpha / 2 * n_boot)], means[min(n_boot - 1, int((1 - alpha / 2) * n_boot))]


def accuracy(correct: Iterable[bool], z: float = 1.96) -> dict:
    """``{"accuracy", "accuracy_low", "accuracy_high", "n_samples"}`` (Wilson interval)."""
    xs = [bool(c) for c in correct]
    k, n = sum(xs), len(xs)
    low, high = wilson_interval(k, n, z)
    return {"accuracy": k / n if n else float("nan"), "accuracy_low": low, "accuracy_high": high, "n_samples": n}
