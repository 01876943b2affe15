"""Optuna's journal file, safe against interrupted writes, with damage named and a repair.

Optuna appends each operation as one JSON line. A writer killed mid-write (or a full disk) leaves the last line
cut short; readers skip such a tail, but Optuna's next append glues its record onto the fragment, and that line then
makes the whole file unreadable. :class:`JournalFile` seals the tail under the journal lock before appending: a
fragment is moved to ``<journal>.fragments`` (nothing is thrown away), a complete record that only lacks its newline
gets one. An append that fails (a full disk) is cut back to where it began, so that no half-written record is left, and
stops the sweep with one :class:`~recdiff.errors.SweepStopped` line naming the journal. Reading a damaged journal
raises one :class:`RecdiffError` line naming the file and the line.
:func:`repair` (``python -m recdiff.study repair FILE``) fixes journals damaged before this existed.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import threading
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

from recdiff.errors import RecdiffError, SweepStopped, no_space
from recdiff.study.storage import JOURNAL_OP_CODES as _OP_CODES
from recdiff.study.storage import journal_lock

RECORD_START = b'{"op_code":'   # how Optuna writes every record (json.dumps with compact separators)
T = TypeVar("T")


def _record(data: bytes) -> dict[str, Any] | None:
    """``data`` as a journal record, or None when it is not one."""
    try:
        obj = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    ok = isinstance(obj, dict) and obj.get("op_code") in _OP_CODES and isinstance(obj.get("worker_id"), str)
    return obj if ok else None


def _unglue(line: bytes) -> int | None:
    """Where a complete record starts inside ``line`` when a cut-off record precedes it (a later write glued onto an
    interrupted one), else None."""
    start = line.find(RECORD_START, 1)
    while start > 0:
        if _record(line[start:]) is not None:
            return start
        start = line.find(RECORD_START, start + 1)
    return None


@dataclass
class Damage:
    line: int            # 1-based
    what: str
    repairable: bool


def find_damage(path: str | os.PathLike) -> Damage | None:
    """The first line that keeps Optuna from reading ``path``: an invalid line with more lines after it (readers skip
    an invalid last line, and appending seals it)."""
    with open(path, "rb") as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines[:-1], 1):
        if _record(line) is not None:
            continue
        if _unglue(line) is not None:
            return Damage(i, "a record cut short by an interrupted write, with a later record glued onto it", True)
        return Damage(i, "not a journal record", False)
    return None


def damage_error(path: str | os.PathLike) -> RecdiffError:
    damage = find_damage(path)
    if damage is None:   # damaged while we read it, then fixed: ask to try again
        return RecdiffError(f"journal {path} could not be read; try again")
    fix = (f"run `python -m recdiff.study repair {path}`" if damage.repairable else
           "repair cannot drop a complete line: restore it from a backup")
    return RecdiffError(f"journal {path} is damaged at line {damage.line}: {damage.what}; {fix}")


class JournalFile(JournalFileBackend):
    """:class:`~optuna.storages.journal.JournalFileBackend` that never appends onto a cut-off record and names the
    line when the file cannot be read."""

    def __init__(self, file_path: str) -> None:
        self.path, self.lock = file_path, JournalFileSymlinkLock(file_path)   # ours: Optuna keeps its own private
        super().__init__(file_path, self.lock)
        self.line = 0   # the line of the record read last (names a record that cannot be replayed)
        self._holder: int | None = None   # the thread holding the lock through exclusive()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the journal's lock: no other process appends until the block ends; this thread's appends go on
        (a check of what the journal holds and the write it allows, as one step)."""
        with journal_lock(self.lock):
            self._holder = threading.get_ident()
            try:
                yield
            finally:
                self._holder = None

    def read_logs(self, log_number_from: int) -> Iterator[dict[str, Any]]:
        try:
            # Optuna yields line after line from log_number_from, and raises at the line after a bad one
            for line, log in enumerate(super().read_logs(log_number_from), log_number_from + 1):
                if not isinstance(log, dict) or log.get("op_code") not in _OP_CODES:
                    raise RecdiffError(f"journal {self.path} is damaged at line {line}: not a journal record; "
                                       "repair cannot drop a complete line: restore it from a backup")
                self.line = line
                yield log
        except RecdiffError:
            raise
        except (json.JSONDecodeError, ValueError, UnicodeDecodeError):
            raise damage_error(self.path) from None

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        # as Optuna writes them, in one write
        text = ("\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n").encode("utf-8")
        try:
            held = self._holder == threading.get_ident()
            with nullcontext() if held else journal_lock(self.lock):
                seal_tail(self.path)
                _append(self.path, text)
        except OSError as e:
            raise SweepStopped(f"journal {self.path}: cannot write ({no_space(e)}): the sweep stopped; the journal "
                               "is intact: run the same command again once there is room") from None


def _append(path: str, data: bytes) -> None:
    """``data`` at the end of ``path``, all or nothing: a write cut short (a full disk) is cut back off."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:   # unbuffered: a short write is seen here, not replayed by a buffer on close
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError:
            os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)


def replayed(backend: JournalFile, make: Callable[[], T]) -> T:
    """``make()``, a storage that replays the journal on creation, with any error named by file and line."""
    try:
        return make()
    except RecdiffError:
        raise
    except Exception as err:  # noqa: BLE001 — a record Optuna cannot apply: name it instead of a traceback
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise RecdiffError(f"journal {backend.path} cannot be read at line {backend.line}: "
                           f"{type(err).__name__} {first}".rstrip()) from None


def _tail_start(f: Any, size: int) -> int:
    """Offset just after the last newline of the open file (0 when there is none)."""
    pos = size
    while pos > 0:
        step = min(1 << 16, pos)
        f.seek(pos - step)
        cut = f.read(step).rfind(b"\n")
        if cut >= 0:
            return pos - step + cut + 1
        pos -= step
    return 0


def seal_tail(path: str | os.PathLike) -> int:
    """Make the file end with a complete record and a newline, so that an append cannot glue onto a fragment: a
    complete last record that lacks its newline gets one; a cut-off last record is moved to ``<path>.fragments``
    (keeping a complete record glued onto it). Call it holding the journal lock. Returns the bytes moved away."""
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        f.seek(size - 1)
        terminated = f.read(1) == b"\n"
        end = size - 1 if terminated else size
        start = _tail_start(f, end)
        f.seek(start)
        body = f.read(end - start)
        if _record(body) is not None:
            if not terminated:
                f.seek(size)
                f.write(b"\n")
            return 0
        cut = _unglue(body) or len(body)
        with open(f"{path}.fragments", "ab") as side:
            side.write(body[:cut] + b"\n")
        f.truncate(start)
        f.seek(start)
        f.write(body[cut:] + b"\n" if cut < len(body) else b"")
        f.flush()
        os.fsync(f.fileno())
    return cut


@dataclass
class Repair:
    path: Path
    backup: Path | None = None
    dropped: list[tuple[int, int]] = field(default_factory=list)   # (line, bytes) of each incomplete record
    completed: bool = False                                          # a last record got its missing newline

    def __str__(self) -> str:
        if self.backup is None:
            return f"{self.path}: nothing to repair"
        what = [f"line {line} ({n} bytes)" for line, n in self.dropped]
        parts = ([f"dropped the incomplete record{'s' if len(what) > 1 else ''} at {', '.join(what)}"] if what else [])
        parts += ["ended the last record with its missing newline"] if self.completed else []
        return f"{self.path}: {'; '.join(parts)}; the original is kept as {self.backup}"


def repair(path: str | os.PathLike) -> Repair:
    """Back up ``path`` and drop only incomplete records: a cut-off last line, or a cut-off record that a later write
    was glued onto (the later record is kept). Refuses, naming the line, when any other line is damaged."""
    path = Path(path)
    if not path.is_file():
        raise RecdiffError(f"no journal file at {path}")
    lock = JournalFileSymlinkLock(str(path))
    with journal_lock(lock):   # no writer may append meanwhile
        lines = path.read_bytes().splitlines(keepends=True)
        report, out = Repair(path), []
        for i, line in enumerate(lines, 1):
            body = line.rstrip(b"\r\n")
            if _record(body) is not None:
                if not line.endswith(b"\n"):
                    report.completed = True
                out.append(body + b"\n")
                continue
            start = _unglue(body)
            if start is not None:
                report.dropped.append((i, start))
                out.append(body[start:] + b"\n")
            elif i == len(lines) and not line.endswith(b"\n"):
                report.dropped.append((i, len(line)))
            else:
                raise RecdiffError(f"journal {path} line {i} is not a journal record and not an incomplete one: "
                                   "not repaired (restore it from a backup)")
        if not report.dropped and not report.completed:
            return report
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        report.backup = path.with_name(f"{path.name}.{stamp}.bak")
        shutil.copy2(path, report.backup)
        tmp = path.with_name(f".{path.name}.repair.tmp")
        tmp.write_bytes(b"".join(out))
        os.replace(tmp, path)
    return report
