"""``python -m recdiff.bench``: a forward to the speed bench, :mod:`recdiff.tools.speed`, which lives with the other
tools. It stays because the command is documented under this name (README, docs/speed.md, the GPU check)."""

import sys

from recdiff.errors import RecdiffError
from recdiff.tools.speed import main

if __name__ == "__main__":
    try:
        main()
    except RecdiffError as e:  # bad input (a model name, a sampler row): one line, no traceback
        sys.exit(f"error: {e}")
