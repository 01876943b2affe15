"""``python -m recdiff.bench_authors``: the documented entry point of the comparison with the authors' reference;
it lives in :mod:`recdiff.tools.bench_authors`."""

from recdiff.tools.bench_authors import main

if __name__ == "__main__":
    main()
