"""A PostgreSQL server for the tests: Debian's binaries, started as an unprivileged user on loopback in a temp dir;
stopped and started again by the tests of a restarted database (as shell commands a sweep's fault can run too)."""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_binaries() -> Path | None:
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    initdb = bins[-1] if bins else shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class Postgres:
    def __init__(self, bindir: Path) -> None:
        self.bindir, self.port = bindir, free_port()
        self.data = Path(tempfile.mkdtemp(prefix="recdiff-pg-"))
        root = os.geteuid() == 0
        if root:
            shutil.chown(self.data, "postgres", "postgres")
        self.as_user = ["runuser", "-u", "postgres", "--"] if root else []
        subprocess.run([*self.as_user, str(bindir / "initdb"), "-D", str(self.data / "db"), "-U", "postgres",
                        "--auth=trust", "-E", "UTF8"], check=True, capture_output=True)
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _ctl(self, *args: str) -> list[str]:
        return [*self.as_user, str(self.bindir / "pg_ctl"), "-D", str(self.data / "db"), *args]

    @property
    def start_cmd(self) -> str:
        return shlex.join(self._ctl("-l", str(self.data / "log"), "-w", "-t", "60", "-o",
                                    f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 "
                                    "-c max_connections=50", "start"))

    @property
    def stop_cmd(self) -> str:   # fast: open connections are closed, as a restarted server does
        return shlex.join(self._ctl("-w", "-m", "fast", "stop"))

    def start(self) -> None:
        subprocess.run(self.start_cmd, shell=True, check=True, capture_output=True)

    def stop(self) -> None:
        subprocess.run(self.stop_cmd, shell=True, check=True, capture_output=True)

    def remove(self) -> None:
        subprocess.run(self._ctl("-m", "immediate", "stop"), capture_output=True)
        shutil.rmtree(self.data, ignore_errors=True)
