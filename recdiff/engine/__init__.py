"""The engine: runners over fixed buffers (compiled, captured, replayed) and the scheduler. What a sampler uses of it
is this module's names, the step interface: :class:`Step` (a step function and its constants, from which the engine
derives every program and graph key), the :class:`Runner` of a model and shape (the model's operations P, R, C,
lanes; buffers; one step run eagerly, compiled or replayed) and the scheduler's :class:`Request` with its
:class:`Record`."""

from recdiff.engine.runner import Runner
from recdiff.engine.runner_cache import cache_length, call_length, get_runner
from recdiff.engine.scheduler import Record, Request, run_batched
from recdiff.engine.step import Step

__all__ = ["Record", "Request", "Runner", "Step", "cache_length", "call_length", "get_runner", "run_batched"]
