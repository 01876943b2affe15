"""A throwaway PostgreSQL server: Debian's binaries, started on loopback in a temp dir (as the unprivileged user
``postgres`` when run as root), stopped and started again by the soak's restarts and by the tests of a restarted
database (the commands are shell strings a sweep's injected fault can run too)."""

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
    """The folder of ``initdb`` and ``pg_ctl`` (the newest Debian version), None when PostgreSQL is not installed."""
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    initdb = bins[-1] if bins else shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class Postgres:
    def __init__(self, bindir: Path, max_connections: int = 50) -> None:
        self.bindir, self.port, self.max_connections = bindir, free_port(), max_connections
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
                                    f"-c max_connections={self.max_connections}", "start"))

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
