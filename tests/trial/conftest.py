"""The fixtures of the trial's tests, from tests/sweep_helpers.py (shared with the other folders whose tests
compose configs or run sweeps)."""

from tests.sweep_helpers import _clear_hydra  # noqa: F401  (fixtures: pytest finds them here)
