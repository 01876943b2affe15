"""``python -m recdiff.benchmarks selfcheck``: does the executor work *and* contain programs on this machine?

Runs every HumanEval canonical solution (must pass), 10 deliberately wrong completions (must fail) and a
set of hostile programs (each must be contained, and the host unchanged afterwards).  Hostile programs
only target resources this check creates itself (a scratch directory, a fake secret), so running it
is harmless even where the isolation is weaker (non-root: see README.md); the failures it then reports
are the honest list of what your machine does not isolate.  Ends with one line ``N passed, M failed``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable

from recdiff.benchmarks.executor import ExecResult, Job, Limits, _proc_ids, run, run_many

# (task_id, wrong body): each differs from the reference behaviour on the problem's own tests.
WRONG_COMPLETIONS: dict[str, str] = {
    "HumanEval/0": "    return False\n",
    "HumanEval/2": "    return number\n",
    "HumanEval/4": "    mean = sum(numbers) / len(numbers)\n    return sum(x - mean for x in numbers) / len(numbers)\n",
    "HumanEval/7": "    return [s for s in strings if s.startswith(substring)]\n",
    "HumanEval/12": "    return min(strings, key=len) if strings else None\n",
    "HumanEval/13": "    return a * b\n",
    "HumanEval/23": "    return len(string) + 1\n",
    "HumanEval/28": "    return ' '.join(strings)\n",
    "HumanEval/35": "    return min(l)\n",
    "HumanEval/53": "    return x - y\n",
}


@dataclass
class Hostile:
    name: str
    code: str                                   # str.format fields: {victim}, {outside}, {secret_name}, {token}
    contained: Callable[[ExecResult], bool]     # verdict-level expectation
    tests: str | None = None
    entry_point: str | None = None


def _not_passed(r: ExecResult) -> bool:
    return not r.passed


HOSTILE: list[Hostile] = [
    Hostile("infinite loop", "while True:\n    pass\n", lambda r: r.status == "timeout"),
    Hostile("fork bomb (guard bypassed via posix.fork)",
            "import posix\nwhile True:\n    try:\n        posix.fork()\n    except OSError:\n        pass\n",
            _not_passed),
    Hostile("memory bomb", "x = []\nwhile True:\n    x.append(bytearray(50 * 2**20))\n", _not_passed),
    Hostile("huge output", "import sys\nwhile True:\n    sys.stdout.write('x' * 2**20)\n",
            lambda r: not r.passed and len(r.stdout) < 10_000),
    Hostile("stdin read", "input()\n", lambda r: r.status == "failed" and "EOFError" in (r.error or "")),
    Hostile("write outside the temporary directory",
            "for p in [{victim_dir!r} + '/new_file', {outside!r}]:\n"
            "    try:\n        open(p, 'w').write('pwned')\n    except OSError:\n        pass\n", lambda r: True),
    Hostile("delete files",
            "import posix, shutil\nfor f in (lambda p: posix.unlink(p), lambda p: posix.rename(p, p + '.x'),\n"
            "          lambda p: open(p, 'w').write('overwritten')):\n"
            "    try:\n        f({victim!r})\n    except Exception:\n        pass\n", lambda r: True),
    Hostile("read environment secrets",
            "import os, posix\nfound = [str(os.environ.get({secret_name!r}))]\n"
            "for pid in os.listdir('/proc'):\n"
            "    try:\n        found.append(open('/proc/%s/environ' % pid, 'rb').read().decode('latin1'))\n"
            "    except Exception:\n        pass\nprint('\\n'.join(found))\n", lambda r: True),
    Hostile("daemon that leaves the session",
            "import posix, time\nif posix.fork() == 0:\n    posix.setsid()\n    if posix.fork() == 0:\n"
            "        time.sleep(120)\n    posix._exit(0)\n", lambda r: True),
    Hostile("os._exit(0) before the tests", "import os\ndef add(a, b):\n    return a - b\nos._exit(0)\n", _not_passed,
            tests="def check(candidate):\n    assert candidate(2, 3) == 5\n", entry_point="add"),
    Hostile("object equal to everything",
            "class Any:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
            "def add(a, b):\n    return Any()\n", _not_passed,
            tests="def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(1, 1) == 2\n",
            entry_point="add"),
    Hostile("int subclass equal to everything",
            "class I(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
            "def add(a, b):\n    return I(0)\n", _not_passed,
            tests="def check(candidate):\n    assert candidate(2, 3) == 5\n", entry_point="add"),
    Hostile("SystemExit(0) inside the candidate", "import sys\ndef add(a, b):\n    sys.exit(0)\n", _not_passed,
            tests="def check(candidate):\n    assert candidate(2, 3) == 5\n", entry_point="add"),
]

HOSTILE_LIMITS = Limits(timeout_s=3.0, memory_mb=256, max_procs=16, max_file_mb=4)


def leftovers(r: ExecResult) -> list[int]:
    """Processes of the program still alive: by its private uid, and by the job directory, which every
    process forked from the sandbox bootstrap carries in its command line."""
    pids = set(_proc_ids(uid=r.isolation["uid"])) if r.isolation.get("uid") is not None else set()
    tag = r.isolation["job_dir"].encode()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if tag in f.read():
                        pids.add(int(name))
            except OSError:
                pass
    return sorted(pids)


def run_hostile(h: Hostile, limits: Limits = HOSTILE_LIMITS) -> tuple[bool, str]:
    """Run one hostile program against a scratch victim; (contained and host unchanged, explanation)."""
    scratch = tempfile.mkdtemp(prefix="recdiff-selfcheck-")
    os.chmod(scratch, 0o755)  # readable and traversable by anyone, writable only by us
    victim = os.path.join(scratch, "victim.txt")
    with open(victim, "w") as f:
        f.write("precious")
    os.chmod(victim, 0o644)
    outside = os.path.join(tempfile.gettempdir(), f"recdiff-selfcheck-outside-{secrets.token_hex(6)}")
    secret_name, token = "RECDIFF_SELFCHECK_SECRET", secrets.token_hex(16)
    old = os.environ.get(secret_name)
    os.environ[secret_name] = token
    try:
        code = h.code.format(victim=victim, victim_dir=scratch, outside=outside, secret_name=secret_name, token=token)
        r = run(Job(code, tests=h.tests, entry_point=h.entry_point), limits)
        problems = []
        if not h.contained(r):
            problems.append(f"verdict {r.status} ({r.error})")
        left = leftovers(r)
        if left:
            problems.append(f"{len(left)} process(es) left running")
        if sorted(os.listdir(scratch)) != ["victim.txt"] or open(victim).read() != "precious":
            problems.append("files outside its directory were changed")
        if os.path.exists(outside):
            problems.append(f"{outside} was left behind")
        if token in r.stdout or token in r.stderr:
            problems.append("the secret was read")
        if r.wall_s > limits.timeout_s + 5:
            problems.append(f"took {r.wall_s:.1f} s")
        return not problems, "; ".join(problems) or f"contained ({r.status})"
    finally:
        if old is None:
            os.environ.pop(secret_name, None)
        else:
            os.environ[secret_name] = old
        shutil.rmtree(scratch, ignore_errors=True)
        if os.path.lexists(outside):
            os.unlink(outside) if not os.path.isdir(outside) else shutil.rmtree(outside, ignore_errors=True)


def main(workers: int = 2, verbose: bool = False) -> int:
    from recdiff.benchmarks.humaneval import package_rows, program

    passed = failed = 0
    rows = package_rows()
    t0 = time.monotonic()
    results = run_many([Job(r["prompt"] + r["canonical_solution"], tests=r["test"], entry_point=r["entry_point"])
                        for r in rows], workers=workers)
    bad = [(row["task_id"], r.status, r.error) for row, r in zip(rows, results) if not r.passed]
    passed += len(rows) - len(bad)
    failed += len(bad)
    print(f"canonical solutions: {len(rows) - len(bad)}/{len(rows)} passed in {time.monotonic() - t0:.1f} s")
    for b in bad:
        print(f"  FAIL {b}")
    by_id = {r["task_id"]: r for r in rows}
    wrong = run_many([Job(program(by_id[t]["prompt"], body), tests=by_id[t]["test"],
                          entry_point=by_id[t]["entry_point"])
                      for t, body in WRONG_COMPLETIONS.items()], workers=workers)
    n_rejected = sum(not r.passed for r in wrong)
    passed += n_rejected
    failed += len(wrong) - n_rejected
    print(f"wrong completions rejected: {n_rejected}/{len(wrong)}")
    for h in HOSTILE:
        ok, why = run_hostile(h)
        passed, failed = passed + ok, failed + (not ok)
        print(f"  {'ok  ' if ok else 'FAIL'} {h.name}: {why}")
    mode = "private uid" if os.geteuid() == 0 else "your own uid (run as root for full isolation; see README)"
    print(f"programs ran as: {mode}")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
