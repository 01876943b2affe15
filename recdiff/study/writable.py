"""Write access, checked before anything loads or is recorded: the sweep and job directories, the storage and the
artifact directory. A failure is a configuration error: one :class:`RecdiffError` line, exit code 2, no trial
recorded (the settings themselves are checked when the plan is built, ``recdiff/schema.py``)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from recdiff.errors import RecdiffError
from recdiff.study.connect import journal_path, resolve_storage_url

if TYPE_CHECKING:
    from recdiff.schema import StudyConfig


def check_writable(path: Path, what: str) -> None:
    """Create ``path`` (a directory) if needed and a file in it, now rather than after the evaluation."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".recdiff-write-check-"):
            pass
    except OSError as e:
        raise RecdiffError(f"{what} {path} is not writable: {e.strerror or e}") from None


def storage_dir(url: str) -> Path | None:
    """The local directory a storage writes to (journal file or SQLite database), None for a server."""
    url = resolve_storage_url(url)
    if "://" not in url:
        return Path(url).parent
    if url.startswith("sqlite:///") and url.split(":///", 1)[1] not in ("", ":memory:"):
        return Path(url.split(":///", 1)[1]).expanduser().parent
    return None


def check_writable_outputs(study: StudyConfig, job_dir: Path, top_dir: Path) -> None:
    """The sweep directory, the storage and the artifact directory."""
    check_writable(top_dir, "sweep directory")
    check_writable(job_dir, "job directory")
    where = storage_dir(study.storage)
    if where is not None:
        check_writable(where, "study.storage directory")
    journal = journal_path(study.storage)
    if journal is not None and journal.exists():
        try:
            open(journal, "ab").close()
        except OSError as e:
            raise RecdiffError(f"study.storage {journal} is not writable: {e.strerror or e}") from None
    check_writable(Path(study.artifact_dir), "study.artifact_dir")
