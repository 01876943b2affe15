"""Who holds a claim: the machine and the process of a RUNNING trial.

A claim (a RUNNING trial) names its claimant, so that a worker on the same machine sees at once that the claimant is
gone (SIGKILL, the OOM killer, a crashed joblib worker) instead of waiting ``study.grace_period`` for its heartbeat to
go stale. A claimant elsewhere (another node, another container) cannot be looked at: its heartbeat decides.

The same machine means the same kernel boot and the same PID namespace, where a process id names one process; the
process's start time tells a reused id apart. Where ``/proc`` is missing, nothing is judged here (heartbeats only).
"""

from __future__ import annotations

import os
import socket
from functools import cache
from typing import Any


@cache
def machine() -> str | None:
    """This kernel boot and PID namespace, where process ids can be looked up; None without ``/proc``."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return None


def _stat(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after "pid (comm)" (from field 3, the state), None for no live process (a zombie has
    died, only its exit is unread)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields


def started(pid: int) -> int | None:
    """The process's start time (clock ticks after boot); None when there is no such live process."""
    fields = _stat(pid)
    return None if fields is None else int(fields[19])   # field 22


def is_child(claimant: Any) -> bool:
    """True when ``claimant`` is a live child of this process (a worker a launcher started here)."""
    if not isinstance(claimant, dict) or claimant.get("machine") != machine() or machine() is None:
        return False
    fields = _stat(claimant.get("pid") or 0)
    return fields is not None and int(fields[1]) == os.getpid() and int(fields[19]) == claimant.get("started")


def this_process() -> dict[str, Any]:
    pid = os.getpid()
    return {"host": socket.gethostname(), "machine": machine(), "pid": pid, "started": started(pid)}


def is_gone(claimant: Any) -> bool:
    """True when ``claimant`` (as :func:`this_process` wrote it) ran on this machine and that process has ended."""
    if not isinstance(claimant, dict) or machine() is None or claimant.get("machine") != machine():
        return False
    pid, when = claimant.get("pid"), claimant.get("started")
    return isinstance(pid, int) and when is not None and started(pid) != when


def describe(claimant: Any) -> str:
    if not isinstance(claimant, dict):
        return "an unknown process"
    return f"process {claimant.get('pid')} on {claimant.get('host')}"
