"""``python -m recdiff.lm_eval <arguments of lm_eval>``: lm-eval's command line with the model ``recdiff`` registered.

lm-eval 0.4.13 finds models only in its own registry (it has no plugin entry points), so the plain ``lm_eval``
command does not know ``recdiff``; this is the same command after ``import recdiff.lm_eval``. Bad input (an unknown
task, a sampler parameter of the wrong type, a generation argument recdiff cannot honour) ends with one line
``error: ...`` and exit code 2 (``RECDIFF_TRACEBACK=1`` shows the traceback).
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    try:
        from lm_eval.__main__ import cli_evaluate

        import recdiff.lm_eval  # noqa: F401  (registers the model)

        cli_evaluate()
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # lm-eval's own errors are tracebacks; end in one line, as recdiff does everywhere
        if os.environ.get("RECDIFF_TRACEBACK"):
            raise
        lines = str(exc).strip().splitlines()
        print(f"error: {lines[0] if lines else type(exc).__name__}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
