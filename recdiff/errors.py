"""The one exception type recdiff raises for bad user input."""


class RecdiffError(ValueError):
    """One-line, user-facing error."""
