"""A one-node SLURM cluster on this machine, for the tests: Debian's ``slurm-wlm`` and ``munge``, with ``munged``,
``slurmctld`` and ``slurmd`` run in the foreground by the test (root only: slurmd starts jobs as their users) and
stopped by it, and job accounting as real clusters have it: ``slurmdbd`` over a private MariaDB (Debian's
``slurmdbd`` and ``mariadb-server``). submitit asks ``sacct`` for the state of a job that left no result, such as a
cancelled one; without accounting it would wait for it forever. Everything lives in one folder: a fresh munge key,
``slurm.conf`` and ``slurmdbd.conf`` on free ports, the database, state and logs; munged uses its default socket
(started only when no munged answers there). Client commands find the cluster through ``SLURM_CONF``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "slurmdbd", "mariadbd", "mariadb-install-db")
PACKAGES = ("slurm-wlm", "munge", "slurmdbd", "mariadb-server")


def unavailable() -> str | None:
    """Why no cluster can start here (a skip reason), or None. Not root: slurmd cannot start jobs as their users."""
    if os.geteuid() != 0:
        return f"a one-node SLURM cluster needs root to start slurmctld and slurmd (running as uid {os.geteuid()})"
    return None


def ensure_installed() -> None:
    """Debian's packages, installed when missing (``.ci/run`` installs them up front)."""
    if all(shutil.which(d) for d in DAEMONS):
        return
    if shutil.which("apt-get") is None:
        raise RuntimeError(f"{', '.join(PACKAGES)} are not installed and there is no apt-get to install them")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES], env=env, check=True,
                   capture_output=True, timeout=600)


def memory_mb() -> int:
    """This machine's memory (a node configured with more than it has would be drained)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.host = socket.gethostname().split(".")[0]
        self.conf = root / "slurm.conf"
        # the default socket: Slurm's clients use it for slurmdbd whatever AuthInfo says (Slurm 22.05)
        self.socket = Path("/run/munge/munge.socket.2")
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.procs: list[subprocess.Popen] = []

    def write(self) -> None:
        for d in ("state", "spool", "munge", "db"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        (self.root / "munge").chmod(0o700)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        r = self.root
        self.db_port, self.dbd_port = free_port(), free_port()
        dbd = r / "slurmdbd.conf"
        dbd.write_text("\n".join([
            "AuthType=auth/munge", "DbdHost=localhost", f"DbdPort={self.dbd_port}",
            "SlurmUser=root", f"PidFile={r}/slurmdbd.pid", f"LogFile={r}/slurmdbd.log",
            "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1", f"StoragePort={self.db_port}",
            "StorageUser=slurm", "StoragePass=slurm", "StorageLoc=slurm_acct_db", "",
        ]))
        dbd.chmod(0o600)
        self.conf.write_text("\n".join([
            "ClusterName=recdiff-test",
            f"SlurmctldHost={self.host}(127.0.0.1)",
            "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge",
            f"StateSaveLocation={r}/state", f"SlurmdSpoolDir={r}/spool",
            f"SlurmctldPidFile={r}/slurmctld.pid", f"SlurmdPidFile={r}/slurmd.pid",
            f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}",
            f"SlurmctldLogFile={r}/slurmctld.log", f"SlurmdLogFile={r}/slurmd.log",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
            "SchedulerType=sched/builtin", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory",
            "ReturnToService=2", "KillWait=10", "MinJobAge=3600", "DefMemPerCPU=1024",
            "AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=localhost",
            f"AccountingStoragePort={self.dbd_port}", "JobAcctGatherType=jobacct_gather/none",
            f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} "
            f"RealMemory={memory_mb() // 2} State=UNKNOWN",
            f"PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))

    def start(self, timeout: float = 60) -> None:
        self.write()
        r, log = self.root, lambda name: open(self.root / f"{name}.out", "w")
        if subprocess.run(["munge", "-n"], capture_output=True).returncode != 0:   # else this machine's munged serves
            self.socket.parent.mkdir(parents=True, exist_ok=True)
            self._spawn(["munged", "--foreground", "--force", f"--socket={self.socket}",
                         f"--key-file={r}/munge/munge.key", f"--pid-file={r}/munge/munged.pid",
                         f"--log-file={r}/munge/munged.log", f"--seed-file={r}/munge/munged.seed"], log("munged"))
            self._wait(lambda: self.socket.exists(), timeout, "munged did not open its socket")
        self._database(timeout, log)
        self._spawn(["slurmdbd", "-D"], log("slurmdbd"), SLURM_CONF=str(self.conf))
        self._wait(lambda: self.run("sacctmgr", "-i", "add", "cluster", "recdiff-test", check=False).returncode == 0,
                   timeout, "slurmdbd did not answer")
        self._spawn(["slurmctld", "-D", "-f", str(self.conf)], log("slurmctld"))
        self._spawn(["slurmd", "-D", "-f", str(self.conf)], log("slurmd"))
        self._wait(lambda: self.node_state() == "idle", timeout, "the node did not become idle")

    def _database(self, timeout: float, log) -> None:
        """A private MariaDB on a free port, with the user slurmdbd connects as."""
        data, sock = self.root / "db" / "data", self.root / "db" / "mysqld.sock"
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
                        "--auth-root-authentication-method=normal", "--skip-test-db"], cwd=self.root, check=True,
                       capture_output=True, timeout=300)
        self._spawn(["mariadbd", "--no-defaults", f"--datadir={data}", "--user=root", f"--socket={sock}",
                     f"--port={self.db_port}", "--bind-address=127.0.0.1", "--skip-log-bin",
                     "--innodb-buffer-pool-size=32M", f"--log-error={self.root / 'db' / 'mysqld.err'}"],
                    log("mariadbd"))
        sql = ("CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm'; "
               "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';")
        self._wait(lambda: subprocess.run(["mariadb", "--no-defaults", f"--socket={sock}", "-uroot", "-e", sql],
                                          capture_output=True).returncode == 0, timeout, "MariaDB did not start")

    def _spawn(self, cmd: list[str], out, **env: str) -> None:
        self.procs.append(subprocess.Popen(cmd, cwd=self.root, env={**self.env, **env}, stdout=out,
                                           stderr=subprocess.STDOUT))

    def _wait(self, ready, timeout: float, what: str) -> None:
        end = time.time() + timeout
        while time.time() < end:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited with {p.returncode}: {self.logs()}")
            if ready():
                return
            time.sleep(0.3)
        raise RuntimeError(f"{what} within {timeout:g} s: {self.logs()}")

    def node_state(self) -> str:
        out = self.run("sinfo", "-h", "-N", "-o", "%T", check=False)
        return out.stdout.strip()

    def run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, timeout=60, check=check)

    def drain(self, timeout: float = 180) -> None:
        """Wait until every job has ended, in the queue and in the accounting (a job ends a moment after submitit
        has its result, and slurmdbd learns it a moment later)."""
        def ended() -> bool:
            return not self.run("squeue", "-h", "-o", "%i").stdout.strip() and \
                all(j["State"] not in ("PENDING", "RUNNING", "COMPLETING") for j in self.accounting())

        self._wait(ended, timeout, "jobs still running")

    def accounting(self) -> list[dict[str, str]]:
        """``sacct``'s record of every job (array task) of the cluster: JobID, JobName, State, ExitCode."""
        out = self.run("sacct", "-a", "-X", "-P", "-n", "-S", "2000-01-01", "-o", "JobID,JobName,State,ExitCode")
        return [dict(zip(("JobID", "JobName", "State", "ExitCode"), line.split("|")))
                for line in out.stdout.splitlines() if line]

    def logs(self) -> str:
        return " | ".join(f"{f.name}: {f.read_text()[-600:]}" for f in sorted(self.root.glob("*.out"))
                          if f.stat().st_size)

    def stop(self) -> None:
        """Cancel what still runs on this cluster, then stop the daemons this object started."""
        if self.procs and all(p.poll() is None for p in self.procs):
            self.run("scancel", "--full", "--partition=debug", check=False)
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
