"""The fixtures of the study package's tests, from tests/sweep_helpers.py (shared with the other folders whose tests
compose configs or run sweeps)."""

from tests.sweep_helpers import _clear_hydra, postgres  # noqa: F401  (fixtures: pytest finds them here)
