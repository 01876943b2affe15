"""Dataset loading: a local file (``path=``), ``$RECDIFF_DATA_DIR/<benchmark>.jsonl|.parquet``, or the
Hugging Face hub through ``datasets``.

When the hub cannot be reached we switch ``datasets`` to offline mode *before* importing it (so it uses
its cache and fails at once instead of retrying for ~20 s) and turn the failure into one
:class:`~recdiff.errors.RecdiffError` line that names the dataset and the settings that fix it.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from urllib.parse import urlparse

from recdiff.errors import RecdiffError

DATA_DIR_ENV = "RECDIFF_DATA_DIR"
_OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def read_local(path: str | os.PathLike, fields: tuple[str, ...] = ()) -> list[dict]:
    """Rows of a JSONL (``.jsonl``/``.json`` with one object per line) or parquet file, each with ``fields``."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise RecdiffError(f"data file not found: {p}")
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(p).to_pylist()
    else:
        rows = []
        with open(p, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise RecdiffError(f"{p}: line {n} is not JSON ({e.msg}); expected one object per line") from None
    if not rows:
        raise RecdiffError(f"{p} is empty" + (f"; expected rows with fields {', '.join(fields)}" if fields else ""))
    for n, row in enumerate(rows, 1):
        missing = [k for k in fields if not isinstance(row, dict) or k not in row]
        if missing:
            found = ", ".join(row) if isinstance(row, dict) else type(row).__name__
            raise RecdiffError(f"{p}: row {n} has no field {missing[0]!r} (expected fields: {', '.join(fields)}; "
                               f"found: {found})")
    return rows


def local_file(bench: str, path: str | None) -> Path | None:
    """The local file for ``bench``: the ``path`` option, else ``$RECDIFF_DATA_DIR/<bench>.{jsonl,parquet}``."""
    if path:
        return Path(path)
    data_dir = os.environ.get(DATA_DIR_ENV)
    if data_dir:
        for ext in (".jsonl", ".parquet"):
            cand = Path(data_dir).expanduser() / f"{bench}{ext}"
            if cand.is_file():
                return cand
    return None


def hub_reachable(timeout: float = 2.0) -> bool:
    """Cheap TCP probe of the hub endpoint; False when offline mode is already requested."""
    if any(os.environ.get(k, "").lower() in ("1", "true", "yes", "on") for k in _OFFLINE_ENV):
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        with socket.create_connection((url.hostname or "huggingface.co", url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def _go_offline() -> None:
    for k in _OFFLINE_ENV:
        os.environ[k] = "1"
    # Already imported (e.g. by another module): flip the flags the libraries read at call time too.
    if "huggingface_hub" in sys.modules:
        try:
            import huggingface_hub.constants as c

            c.HF_HUB_OFFLINE = True
        except Exception:  # pragma: no cover - best effort across versions
            pass
    if "datasets" in sys.modules:
        try:
            import datasets.config as dc

            dc.HF_HUB_OFFLINE = True
            dc.HF_DATASETS_OFFLINE = True
        except Exception:  # pragma: no cover
            pass


def load_hub(bench: str, dataset_id: str, config: str | None, split: str) -> list[dict]:
    """Rows of ``dataset_id`` (``config``/``split``) from the hub or the local ``datasets`` cache."""
    online = hub_reachable()
    if not online:
        _go_offline()
    what = dataset_id + (f" ({config}/{split})" if config else f" ({split})")
    try:
        import datasets

        ds = datasets.load_dataset(dataset_id, config, split=split)
        return [dict(r) for r in ds]
    except (OSError, ConnectionError, ValueError, RuntimeError) as e:  # offline/cache misses surface as these
        cause = "Hugging Face hub unreachable and not in the local cache" if not online else str(e).splitlines()[0]
        raise RecdiffError(
            f"{bench}: cannot load {what}: {cause}; set benchmark.path=<file.jsonl|.parquet> "
            f"or {DATA_DIR_ENV}=<dir containing {bench}.jsonl>") from None


def load_rows(bench: str, path: str | None, dataset_id: str, config: str | None, split: str,
              fields: tuple[str, ...] = ()) -> tuple[list[dict], str]:
    """Rows and a source description: local file (whose rows must have ``fields``) if given, else the hub."""
    local = local_file(bench, path)
    if local is not None:
        return read_local(local, fields), str(local)
    return load_hub(bench, dataset_id, config, split), f"hf:{dataset_id}/{config or ''}/{split}"
