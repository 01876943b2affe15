"""recdiff inside EleutherAI's lm-evaluation-harness (``pip install -e ".[lm-eval]"``).

- :class:`~recdiff.lm_eval.model.RecdiffLM`, registered as lm-eval model ``recdiff``: every sampler with any of its
  parameters, ``generate_until`` through the batched engine, ``loglikelihood(_rolling)`` at the sampler's ``r``.
- :class:`~recdiff.lm_eval.benchmark.LmEvalBenchmark`, the sweep benchmark ``lm_eval`` (``benchmark=lm_eval
  benchmark.task=<name>``): lm-eval builds the prompts, recdiff decodes them, lm-eval scores them.
- ``python -m recdiff.lm_eval <lm_eval arguments>``: lm-eval's own command line with the model registered.

Importing this package imports lm-eval; nothing else in recdiff does.
"""

from __future__ import annotations

from recdiff.errors import RecdiffError

MIN_VERSION = (0, 4, 13)   # the lm-eval API this package is written against (TaskManager.load, evaluate(samples=))

try:
    import lm_eval
except ImportError as exc:
    raise RecdiffError('recdiff.lm_eval needs lm-evaluation-harness: pip install -e ".[lm-eval]"') from exc


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for p in text.split(".")[:3]:
        digits = "".join(c for c in p if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


if _version(lm_eval.__version__) < MIN_VERSION:
    raise RecdiffError(f"recdiff.lm_eval needs lm-eval >= {'.'.join(map(str, MIN_VERSION))}, found "
                       f'{lm_eval.__version__}: pip install -e ".[lm-eval]"')

from recdiff.lm_eval.task_index import install  # noqa: E402

install()   # lm-eval's task index read from disk, not rebuilt by every process (task_index.py)

from recdiff.lm_eval.model import RecdiffLM  # noqa: E402  (registers the model "recdiff")

__all__ = ["RecdiffLM"]
