"""``python -m recdiff.bench``: the speed bench's documented entry point (the GPU check and docs/speed.md call it by
this name); the bench itself lives with the other tools, in :mod:`recdiff.tools.bench`."""

from recdiff.tools.bench import main

if __name__ == "__main__":
    main()
