"""``python -m recdiff.bench``: the speed bench's documented entry point (the GPU check and docs/speed.md call it by
this name); the bench itself lives with the other tools, in :mod:`recdiff.tools.bench`."""

import sys

from recdiff.errors import RecdiffError
from recdiff.tools.bench import main

if __name__ == "__main__":
    try:
        main()
    except RecdiffError as e:  # bad input (a model name, a sampler row): one line, no traceback
        sys.exit(f"error: {e}")
