"""lm-eval's task index, kept on disk between processes. Every ``TaskManager`` parses all of lm-eval's ~16k task
files (``TaskIndex.build``, about 14 s on a 2-core machine), in every process that names a task: each sweep worker of
an lm-eval benchmark and each ``python -m recdiff.lm_eval`` paid it. :func:`install` (importing :mod:`recdiff.lm_eval`
calls it) routes that build through a pickle under the user's cache folder, keyed by lm-eval's version and the path,
size and modification time of every file under lm-eval's task folder, so that an edited, added or removed task file
builds it anew; a user's ``include_path`` (a few files) is indexed as before. A cache that cannot be read or written
costs only the build. The TaskManager around the index, its metadata included, is lm-eval's own.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable

import lm_eval
import lm_eval.tasks
from lm_eval.tasks._index import TaskIndex

log = logging.getLogger(__name__)

_build = TaskIndex.build   # lm-eval's own, which cached_build calls on a miss
CACHED_ROOT = Path(lm_eval.tasks.__file__).parent.resolve()   # lm-eval's own task files


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/recdiff`` (``~/.cache/recdiff`` when unset)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "recdiff"


def fingerprint(root: Path) -> str:
    """A digest of lm-eval's and Python's versions and of every file under ``root`` (relative path, size,
    modification time): a stat of each, a fraction of a second for lm-eval's own tasks."""
    h = hashlib.sha256(f"{lm_eval.__version__}\0{sys.version}\0{root}".encode())
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


def cached_build(paths: Iterable[Path], *, resolve_includes: bool = True) -> dict[str, Any]:
    """``TaskIndex.build(paths)``, with the part of :data:`CACHED_ROOT` (lm-eval's own tasks, the costly one) read
    from the disk cache when its files are unchanged; other folders (a user's ``include_path``, a few files) are
    indexed as lm-eval does. Each folder's part is merged over the ones before it, as lm-eval merges them."""
    paths = list(paths)
    if not resolve_includes or all(Path(p).resolve() != CACHED_ROOT for p in paths):
        return _build(paths, resolve_includes=resolve_includes)
    index: dict[str, Any] = {}
    for p in paths:
        part = _cached_part() if Path(p).resolve() == CACHED_ROOT else _build([p])
        for name, entry in part.items():
            if name in index:
                log.warning("Task '%s' from %s overrides existing task from %s", name, entry.yaml_path,
                            index[name].yaml_path)
            index[name] = entry
    return index


def _cached_part() -> dict[str, Any]:
    """The index of :data:`CACHED_ROOT` from its cache file (one, overwritten when the folder changes), or built
    and written there."""
    path = cache_dir() / "lm_eval-tasks.pkl"
    key = fingerprint(CACHED_ROOT)
    try:
        with open(path, "rb") as f:
            found, index = pickle.load(f)
        if found == key and isinstance(index, dict):
            return index
    except FileNotFoundError:
        pass
    except Exception as exc:   # a truncated or foreign file: built anew and written over
        log.debug("lm-eval task cache %s unreadable (%s): building the index", path, exc)
    index = _build([CACHED_ROOT])
    _write(path, (key, index))
    return index


def install() -> None:
    """Every TaskManager of this process (recdiff's and lm-eval's own command line) builds its index through
    :func:`cached_build`."""
    if TaskIndex.build is not cached_build:
        TaskIndex.build = staticmethod(cached_build)


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
