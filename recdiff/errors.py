"""The exception type recdiff raises for bad user input (and the one for a sweep that cannot go on), and one line
for any error a sweep's input can cause."""

from __future__ import annotations

import difflib
import errno
from typing import Any


class RecdiffError(ValueError):
    """One-line, user-facing error."""


class SweepStopped(RecdiffError):
    """The sweep cannot go on (its storage lost or full), not bad input: exit code 1; nothing recorded is lost, and
    the same command again, once the cause is gone, finishes what is missing."""


# A full disk, a full quota, a file-size limit: a file cannot grow.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def no_space(e: OSError) -> str:
    """Why a write failed, in the words a user searches for ("no space left on device")."""
    if e.errno == errno.EFBIG:
        return "no space: the file size limit is reached (file too large)"
    return (e.strerror or str(e)).lower() if e.errno in NO_SPACE else (e.strerror or str(e))


# ------------------------------------------------------------------------------------------ one-line errors
def _did_you_mean(key: str, parent: Any) -> str:
    try:
        from omegaconf import OmegaConf

        candidates = list(OmegaConf.to_container(parent, resolve=False).keys()) if parent is not None else []
    except Exception:
        candidates = []
    close = difflib.get_close_matches(key, [str(c) for c in candidates], n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def describe_error(exc: BaseException) -> str:
    """One line for a Hydra composition / OmegaConf validation / recdiff error."""
    from hydra.errors import MissingConfigException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError

    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in chain:
        chain.append(e)
        e = e.__cause__ or e.__context__
    for e in chain:
        full_key = getattr(e, "full_key", None)
        if isinstance(e, (ConfigKeyError, ConfigAttributeError)) and full_key:
            key = str(full_key).rsplit(".", 1)[-1]
            return f"unknown config key '{full_key}'{_did_you_mean(key, getattr(e, 'parent_node', None))}"
        if isinstance(e, ValidationError):
            msg = str(e).splitlines()[0].strip()
            return f"{full_key}: {msg}" if full_key else msg
        if isinstance(e, OmegaConfBaseException) and full_key:
            return f"{full_key}: {str(e).splitlines()[0].strip()}"
        if isinstance(e, MissingConfigException):
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            options = []
            for ln in lines[1:]:
                if ln.startswith("Config search path"):
                    break
                if not ln.endswith(":") and not ln.endswith("_schema"):
                    options.append(ln)
            hint = f" (available: {', '.join(options)})" if options else ""
            return f"{lines[0] if lines else 'missing config'}{hint}"
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    # Hydra's "Could not override 'x'." alone says little; add the cause's first line.
    cause = exc.__cause__
    if cause is not None and str(cause).strip():
        text = f"{text.rstrip('.')}: {str(cause).strip().splitlines()[0]}"
    return " ".join(text.split())
