"""Where a sampler step's time goes: the model's calls vs the sampler's own work, and the step's reads to the host.

While :func:`profiling` is active it instruments, and restores on exit:

- each given batch class's ``step`` (one sampler step over every occupied slot:
  :class:`~recdiff.engine.scheduler.SlotBatch`);
- the model calls: the runner's pieces (``Runner.embed``, ``embed_window``, ``cores``, ``cores_exit``, ``decode``:
  P, R and C, eager or compiled; a diffusion step's P gathers its window's token ids and positions from the batch
  state and mixes in the embedding momentum inside its call: :func:`~recdiff.engine.pieces.window_piece`) and
  the model's own ``embed`` / ``core_step`` / ``decode`` called outside a runner; under CUDA graphs a replayed model
  step (``Runner.step`` with ``model=True``), whose replay calls none of them from Python, the few
  operations captured around P, R and C (a diffusion step's noise and momentum) included;
- the reads of a device value by the host: ``item``, ``tolist``, ``numpy``, ``bool()``, ``int()``, ``float()``,
  ``__index__`` of a tensor. On a GPU each waits for the device (a host-device synchronisation); on a CPU it is
  where one would. Implicit synchronisations inside an operator (boolean-mask indexing, ``nonzero`` on a GPU) are
  not seen here.

Only the outermost model call is timed (``recur`` calls ``embed``, ...). The profile's own bookkeeping around a model
call inside a step (after its entry, before the call, and after the call) is timed by itself and taken out of the
step: it is neither the model's time nor the sampler's. What it cannot time stays in the sampler's share: the
wrappers' own calls and returns, and the count of a read. On a GPU every timed boundary synchronises
the device, which itself changes the timing: the profile is a CPU tool there, and a GPU run reads it with care.
"""

from __future__ import annotations

import functools
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import torch

from recdiff.engine.runner import Runner
from recdiff.model import RecurrentDepthModel

RUNNER_CALLS = ("embed", "embed_window", "cores", "cores_exit", "decode")
MODEL_CALLS = ("embed", "core_step", "decode")
READS = ("item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__")


@dataclass
class Profile:
    """Totals while profiling was active. ``step_*``: inside sampler steps only; ``model_s``: every model call
    (admission's prefill included)."""

    steps: int = 0
    step_s: float = 0.0
    step_model_s: float = 0.0
    step_tool_s: float = 0.0  # the profile's own bookkeeping inside the steps, as it timed it
    step_reads: int = 0
    model_s: float = 0.0

    @property
    def own_s(self) -> float:
        """Seconds of the steps outside model calls and the profile's timed bookkeeping: the sampler's own work
        (device and host)."""
        return self.step_s - self.step_model_s - self.step_tool_s

    @property
    def own_share(self) -> float:
        """The sampler's own share of a step (the step without the profile's timed bookkeeping)."""
        return self.own_s / (self.step_s - self.step_tool_s) if self.step_s else float("nan")

    @property
    def tool_share(self) -> float:
        """The profile's timed bookkeeping as a share of the steps as timed."""
        return self.step_tool_s / self.step_s if self.step_s else float("nan")

    @property
    def reads_per_step(self) -> float:
        return self.step_reads / self.steps if self.steps else float("nan")

    @property
    def ms_per_step(self) -> float:
        return 1e3 * self.step_s / self.steps if self.steps else float("nan")


class _State:
    def __init__(self, profile: Profile, sync: Callable[[], None] | None) -> None:
        self.profile, self.sync = profile, sync
        self.in_step = self.in_model = 0


@contextmanager
def profiling(step_classes: Iterable[type], device: torch.device | str = "cpu") -> Iterator[Profile]:
    """Instrument sampler steps, model calls and host reads (module docstring); yields the :class:`Profile` that
    accumulates them."""
    device = torch.device(device)
    # only a GPU's boundaries wait for the device (on a CPU nothing is called: the wrappers' own time counts too)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None
    state = _State(Profile(), sync)
    patches: list[tuple[type, str, Callable[..., Any]]] = []
    for cls in step_classes:
        patches.append((cls, "step", _timed_step))
    patches += [(Runner, name, _timed_model) for name in RUNNER_CALLS] + [(Runner, "step", _timed_graph)]
    patches += [(RecurrentDepthModel, name, _timed_model) for name in MODEL_CALLS]
    patches += [(torch.Tensor, name, _counted_read) for name in READS]
    undo = [_patch(cls, name, make, state) for cls, name, make in patches]
    try:
        yield state.profile
    finally:
        for restore in reversed(undo):
            restore()


def _patch(cls: type, name: str, make: Callable[..., Any], state: _State) -> Callable[[], None]:
    """Replace ``cls.name`` by ``make(original, state)``; returns the function that puts the original back."""
    own = name in vars(cls)
    original = getattr(cls, name)
    setattr(cls, name, make(original, state))

    def restore() -> None:
        if own:
            setattr(cls, name, original)
        else:
            delattr(cls, name)

    return restore


def _timed_step(original: Callable[..., Any], state: _State) -> Callable[..., Any]:
    @functools.wraps(original)
    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        if state.in_step:
            return original(self, *args, **kwargs)
        if state.sync:
            state.sync()
        state.in_step += 1
        t0 = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            if state.sync:
                state.sync()
            p = state.profile
            p.step_s += time.perf_counter() - t0
            p.steps += 1
            state.in_step -= 1

    return step


def _timed_model(original: Callable[..., Any], state: _State) -> Callable[..., Any]:
    perf, profile, sync = time.perf_counter, state.profile, state.sync

    @functools.wraps(original)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if state.in_model:
            return original(self, *args, **kwargs)
        if sync:
            sync()
        entered = perf()
        state.in_model += 1
        t0 = perf()
        try:
            return original(self, *args, **kwargs)
        finally:
            if sync:
                sync()
            t1 = perf()
            state.in_model -= 1
            profile.model_s += t1 - t0
            if state.in_step:
                profile.step_model_s += t1 - t0
                profile.step_tool_s += t0 - entered + perf() - t1

    return call


def _timed_graph(original: Callable[..., Any], state: _State) -> Callable[..., Any]:
    timed = _timed_model(original, state)

    @functools.wraps(original)
    def step(self: Runner, st: Any, *inputs: Any, model: bool = True, **kw: Any) -> Any:
        call = timed if model and self.cuda_graphs else original
        return call(self, st, *inputs, model=model, **kw)

    return step


def _counted_read(original: Callable[..., Any], state: _State) -> Callable[..., Any]:
    @functools.wraps(original)
    def read(self: Any, *args: Any, **kwargs: Any) -> Any:
        if state.in_step:
            state.profile.step_reads += 1
        return original(self, *args, **kwargs)

    return read
