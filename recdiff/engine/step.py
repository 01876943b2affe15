"""The step interface: what a sampler hands the engine to run, and the keys the engine derives from it.

A :class:`Step` is a pure tensor function and every constant it depends on: ``fn(c, run, *args)`` with ``c`` the
step's constants (a frozen dataclass, the sampler's typed parameters inside it, or a tuple of plain values), ``run``
the :class:`~recdiff.engine.runner.Runner` (the model, its cache and buffers) and ``args`` the call's tensors. ``fn``
is a module-level function: no closure, no bound method, no ``functools.partial``, so it can read nothing that is not
in ``c``, ``run`` or its arguments (checked when the step is made). The engine keys every compiled program and every
captured graph by :meth:`Step.key` (the function and :func:`const_key` of every field of ``c``) together with the
shapes and dtypes of the tensors it is called with, and, for a graph, where its fixed buffers are
(:mod:`recdiff.engine.graphs`). Nobody writes a key by hand: a constant that a step reads is in its key because it is
a field of ``c``, and a change of any setting gives a step with another key.
"""

from __future__ import annotations

import dataclasses
import functools
import types
from enum import Enum
from typing import Any, Callable, Hashable


def const_key(c: Any) -> Hashable:
    """A hashable value that equals another's exactly when the constants do: a dataclass by its type and every field
    (recursively), tuples element-wise, enums by their value; anything else as itself (it must be hashable)."""
    if dataclasses.is_dataclass(c) and not isinstance(c, type):
        return (type(c).__qualname__, tuple((f.name, const_key(getattr(c, f.name))) for f in dataclasses.fields(c)))
    if isinstance(c, (tuple, list)):
        return tuple(const_key(v) for v in c)
    if isinstance(c, Enum):
        return c.value
    hash(c)  # a TypeError names an unhashable constant at the step's making, not at a lookup
    return c


@dataclasses.dataclass(frozen=True, eq=False)
class Step:
    """``fn(c, run, *args)`` with its constants ``c``: equal steps (:meth:`key`) run the same program or graph."""

    fn: Callable[..., Any]
    c: Any = ()

    def __post_init__(self) -> None:
        fn = self.fn
        if not isinstance(fn, types.FunctionType) or fn.__closure__ or "<locals>" in fn.__qualname__:
            raise TypeError(f"a step's function must be a module-level function, not {fn!r}: a closure or a bound "
                            f"object would hold constants its key does not name")
        object.__setattr__(self, "_key", (fn.__module__, fn.__qualname__, const_key(self.c)))
        object.__setattr__(self, "_hash", hash(self._key))

    def key(self) -> Hashable:
        return self._key  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, Step) and self._hash == other._hash  # type: ignore[attr-defined]
                                 and self._key == other._key)  # type: ignore[attr-defined]

    def __call__(self, run: Any, *args: Any) -> Any:
        return self.fn(self.c, run, *args)

    @property
    def name(self) -> str:
        """For messages and the profile: the function's name and its constants."""
        return f"{self.fn.__name__}{self.c!r}"[:120]


@functools.lru_cache(maxsize=1024)
def make_step(fn: Callable[..., Any], *c: Any) -> Step:
    """The :class:`Step` of ``fn`` with plain constants ``c`` (ints, floats, bools), made once: the runner's model
    operations are stepped this way on every call."""
    return Step(fn, c)
