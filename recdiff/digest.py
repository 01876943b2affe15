"""A digest of a checkpoint's weight files: how a study's identity and a tuned preset name the weights, so that the
same weights under another path are the same model and other weights under the same path are not."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_DIGESTS: dict[tuple[str, int, int], str] = {}            # (file, size, mtime) → sha256, once per process


def weights_digest(files: list[Path]) -> str:
    """sha256 over the weight files (a Hugging Face cache blob is named by its sha256 already), 16 hex digits."""
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.name}:{file_sha256(f)}\n".encode())
    return h.hexdigest()[:16]


def file_sha256(path: Path) -> str:
    real = path.resolve()
    if _HEX64.match(real.name):
        return real.name
    st = os.stat(real)
    cache_key = (str(real), st.st_size, st.st_mtime_ns)
    if cache_key not in _DIGESTS:
        h = hashlib.sha256()
        with open(real, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 24), b""):
                h.update(block)
        _DIGESTS[cache_key] = h.hexdigest()
    return _DIGESTS[cache_key]
