"""The rules a setting obeys: value checks (each a value → a complaint or None), rules over a combination, and
:func:`validate`, which ``recdiff.generate`` and the sweep both apply, so they accept exactly the same settings.
Torch-free (the sweep's plan checks with them before anything loads)."""

from __future__ import annotations

import difflib
from typing import Any, Callable, Optional, Sequence

from recdiff.errors import RecdiffError

Check = Callable[[Any], Optional[str]]  # a value → a complaint ("must be ...") or None

# The most recurrences a sampler accepts per token (Huginn-0125 was trained around 32 and evaluated up to 64-128):
# beyond it a call is far more likely a typo than an experiment, and it would run for hours without a word.
MAX_RECURRENCE = 1024


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def positive_int(v: Any) -> str | None:
    return None if is_int(v) and v >= 1 else "must be an integer >= 1"


def recurrence(v: Any) -> str | None:
    """A recurrence count: an integer in [1, MAX_RECURRENCE]."""
    return None if is_int(v) and 1 <= v <= MAX_RECURRENCE else f"must be an integer in [1, {MAX_RECURRENCE}]"


def non_negative_int(v: Any) -> str | None:
    return None if is_int(v) and v >= 0 else "must be an integer >= 0"


def unit_interval(v: Any) -> str | None:
    return None if is_number(v) and 0 <= v <= 1 else "must be in [0, 1]"


def half_open_unit(v: Any) -> str | None:
    return None if is_number(v) and 0 <= v < 1 else "must be in [0, 1)"


def non_negative(v: Any) -> str | None:
    return None if is_number(v) and v >= 0 else "must be a number >= 0"


def positive(v: Any) -> str | None:
    return None if is_number(v) and v > 0 else "must be a number > 0"


def boolean(v: Any) -> str | None:
    return None if isinstance(v, bool) else "must be true or false"


def one_of(*choices: str) -> Check:
    def check(v: Any) -> str | None:
        return None if v in choices else f"must be one of {', '.join(choices)}"

    return check


def optional(check: Check) -> Check:
    """``check``, with None allowed (the sampler then picks its own value)."""

    def checked(v: Any) -> str | None:
        complaint = None if v is None else check(v)
        return complaint and complaint.replace("must be", "must be null or", 1)

    return checked


def temperature(v: Any) -> str | None:
    """The selection settings every sampler shares (``recdiff.generate``'s and the sweep's ``run.*``)."""
    return None if is_number(v) and v >= 0 else "must be a number >= 0 (0 = greedy)"


def top_p(v: Any) -> str | None:
    return None if is_number(v) and 0 < v <= 1 else "must be in (0, 1]"


Rule = Callable[[dict[str, Any]], Optional[str]]  # a combination of validated values → a complaint or None


def at_most(name: str, bound: str) -> Rule:
    """``name`` may not exceed ``bound`` (both parameters; a None value is not checked)."""

    def rule(p: dict[str, Any]) -> str | None:
        a, b = p.get(name), p.get(bound)
        return f"{name}={a} exceeds {bound}={b}" if a is not None and b is not None and a > b else None

    rule.__doc__ = f"`{name}` ≤ `{bound}`"   # how the docs state the rule
    return rule


def validate(sampler: str, params: dict[str, Any], spec: dict[str, tuple[Any, Check]],
             rules: Sequence[Rule] = ()) -> dict[str, Any]:
    """Fill defaults from ``spec`` (name → (default, check)), reject unknown names, bad values and bad combinations
    (``rules``) in one line. The API and the sweep both call this, so they accept exactly the same settings."""
    for name in params:
        if name not in spec:
            close = difflib.get_close_matches(name, spec, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(sorted(spec))})"
            raise RecdiffError(f"unknown parameter {name!r} for sampler {sampler!r}{hint}")
    out = {name: params.get(name, default) for name, (default, _) in spec.items()}
    for name, (_, check) in spec.items():
        complaint = check(out[name])
        if complaint:
            raise RecdiffError(f"{sampler} sampler: {name}={out[name]!r} {complaint}")
    for rule in rules:
        complaint = rule(out)
        if complaint:
            raise RecdiffError(f"{sampler} sampler: {complaint}")
    return out
