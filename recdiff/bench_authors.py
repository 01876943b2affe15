"""``python -m recdiff.bench_authors``: a forward to the speed comparison with the authors' reference,
:mod:`recdiff.tools.speed_authors`. It stays because the command is documented under this name (docs/speed.md)."""

from recdiff.tools.speed_authors import main

if __name__ == "__main__":
    main()
