"""What recdiff needs of the torch it finds: one check per feature, and one :class:`RecdiffError` line where it is
missing, never a traceback from inside a private torch module.

``pyproject.toml`` declares ``torch>=2.11`` (:data:`MIN_TORCH`), the oldest torch recdiff is tested with (the GPU
machine's 2.11; CI runs ``constraints.txt``'s). A torch that pip did not check (``pip install --no-deps``, a
cluster's own build) may be older. Public torch API is used as is; private torch modules (the CPU compile path's
inductor and dynamo internals) are looked up once, through :func:`private`, so that a torch that lacks them or moved
them names the feature, the torch found and the torch needed in one line.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import torch

from recdiff.errors import RecdiffError

MIN_TORCH = (2, 11)  # keep in step with pyproject.toml's torch requirement


def version_tuple(version: str) -> tuple[int, int]:
    """``"2.13.0+cpu"``, ``"2.12.0a0+git1234"`` → ``(2, 13)``, ``(2, 12)``; ``(0, 0)`` if it cannot be read."""
    m = re.match(r"(\d+)\.(\d+)", str(version))
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _needed(minimum: tuple[int, int]) -> str:
    return f"torch >= {minimum[0]}.{minimum[1]}"


def require(feature: str, minimum: tuple[int, int] = MIN_TORCH, fallback: str | None = None) -> None:
    """One :class:`RecdiffError` line when the installed torch is older than ``minimum`` for ``feature`` (with
    ``fallback``, what to do instead)."""
    if version_tuple(torch.__version__) < minimum:
        raise RecdiffError(f"{feature} needs {_needed(minimum)}, found torch {torch.__version__}; upgrade torch "
                           "(on a GPU machine, a CUDA build of it: docs/gpu.md, 'Installing on a GPU machine')"
                           + (f" or {fallback}" if fallback else ""))


def private(feature: str, lookup: Callable[[], Any], minimum: tuple[int, int] = MIN_TORCH,
            fallback: str | None = None) -> Any:
    """``lookup()``, which reads private torch modules for ``feature``; a torch without them (too old, or one that
    moved them) gives one :class:`RecdiffError` line naming what is missing, the torch found and the torch needed
    (and ``fallback``, what to do instead)."""
    require(feature, minimum, fallback)
    try:
        return lookup()
    except (ImportError, AttributeError, KeyError) as err:
        what = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise RecdiffError(f"{feature} needs {_needed(minimum)} with its private API as of torch "
                           f"{MIN_TORCH[0]}.{MIN_TORCH[1]}; torch {torch.__version__} lacks it ({what})"
                           + (f"; {fallback}" if fallback else "")) from None
