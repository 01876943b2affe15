"""Accuracy's interval over a slice: the Wilson score interval, scipy's, the one the trials record
(:mod:`recdiff.trial.measure`) and the analysis computes (:func:`analysis.intervals.wilson`).

Wilson's score interval without continuity correction at ``z`` = 1.96 (95%), as the trials have recorded it from the
start: scipy's ``binomtest(k, n).proportion_ci(method="wilson")`` at the confidence level of that ``z``. The one
bootstrap is scipy's too (``scipy.stats.bootstrap``, :mod:`recdiff.timing`).
"""

from __future__ import annotations

Z95 = 1.96   # the trials' 95%: their recorded bounds keep this z (scipy's exact 1.95996 moves them by < 1e-5)


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for ``k`` successes out of ``n`` (95% for z=1.96); (0, 1) when n == 0."""
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return 0.0, 1.0
    # scipy.stats costs ~1.5 s to import: only where an interval is computed
    from scipy import special, stats

    ci = stats.binomtest(int(k), int(n)).proportion_ci(confidence_level=2 * float(special.ndtr(z)) - 1,
                                                       method="wilson")
    # the exact interval contains 0 when k == 0 and 1 when k == n
    return (max(0.0, float(ci.low)) if k else 0.0), (min(1.0, float(ci.high)) if k < n else 1.0)
