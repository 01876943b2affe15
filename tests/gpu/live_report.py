"""A pytest plugin for the device check (``-p tests.gpu.live_report``): every failure's report written out the
moment it arrives, to ``$LIVE_REPORT``, so that a run cut off by its time limit still shows why tests failed."""

from __future__ import annotations

import os
import time

_T0 = time.monotonic()


def pytest_runtest_logreport(report) -> None:  # noqa: ANN001 (pytest's TestReport)
    path = os.environ.get("LIVE_REPORT")
    if "PYTEST_XDIST_WORKER" in os.environ:  # the controller writes what its workers report
        return
    if not path or not (report.failed or (report.when == "call" and report.duration > 20)):
        return
    with open(path, "a") as f:
        head = (f"[{time.monotonic() - _T0:6.0f} s] {report.nodeid} {report.when} {report.outcome} "
                f"({report.duration:.1f} s)")
        f.write(head + "\n" + (str(report.longrepr) + "\n\n" if report.failed else ""))
