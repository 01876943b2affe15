"""lm-eval's task index, kept on disk between processes. ``TaskManager()`` parses all of lm-eval's ~16k task files
(about 14 s on a 2-core machine), in every process that names a task: each sweep worker of an lm-eval benchmark paid
it. The built manager is pickled under the user's cache folder, keyed by lm-eval's version and the path, size and
modification time of every file under the folders it indexed, so that an edited, added or removed task file (in
``include_path`` or in lm-eval itself) builds it anew. A cache that cannot be read or written only costs the build.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import sys
import tempfile
from pathlib import Path

import lm_eval
from lm_eval.tasks import TaskManager

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/recdiff`` (``~/.cache/recdiff`` when unset)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "recdiff"


def fingerprint(roots: list[Path]) -> str:
    """A digest of lm-eval's and Python's versions and of every file under ``roots`` (relative path, size,
    modification time): a stat of each, a fraction of a second for lm-eval's own tasks."""
    h = hashlib.sha256(f"{lm_eval.__version__}\0{sys.version}".encode())
    for root in roots:
        h.update(f"\0root\0{root}".encode())
        for folder, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(folder, name)
                try:
                    st = os.stat(path)
                except OSError:   # removed while we walk: the next process sees the new tree
                    continue
                h.update(f"\0{os.path.relpath(path, root)}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()[:24]


def cached_task_manager(include_path: Path | None = None, include_defaults: bool = True) -> TaskManager:
    """``TaskManager(include_path=..., include_defaults=...)``, from the disk cache when its files are unchanged. One
    cache file per set of indexed folders, overwritten when they change (no stale copies pile up)."""
    roots = [Path(lm_eval.tasks.__file__).parent] if include_defaults else []
    roots += [include_path.resolve()] if include_path else []
    path = cache_dir() / f"lm_eval-tasks-{hashlib.sha256(repr(roots).encode()).hexdigest()[:16]}.pkl"
    key = fingerprint(roots)
    try:
        with open(path, "rb") as f:
            found, manager = pickle.load(f)
        if found == key and isinstance(manager, TaskManager):
            return manager
    except FileNotFoundError:
        pass
    except Exception as exc:   # a truncated or foreign file: built anew and written over
        log.debug("lm-eval task cache %s unreadable (%s): building the index", path, exc)
    manager = TaskManager(include_path=str(include_path) if include_path else None, include_defaults=include_defaults)
    _write(path, (key, manager))
    return manager


def _write(path: Path, value: object) -> None:
    """``value`` pickled to ``path``, written whole under another name and then renamed (a process reading it
    meanwhile sees the old file or the new one); a folder that cannot be written (read-only, full) is left as is."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.name, suffix=".tmp", delete=False) as f:
            tmp = f.name
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError as exc:
        log.debug("lm-eval task cache %s not written (%s)", path, exc)
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
