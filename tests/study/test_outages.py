"""The world around a sweep fails (issue 35): its PostgreSQL server restarts (between trials and mid-trial) or goes
away; its disk fills up (under the artifacts, under the journal). Each time nothing is lost: the sweep finishes, or
stops with one line naming what failed, and the same command again finishes every configuration exactly once."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from optuna.trial import TrialState

from recdiff.study.journal import find_damage
from tests.faults import fault_args, fill_disk
from tests.postgres import Postgres
from tests.sweep_helpers import TINY, exactly_once, load, one_line, requires_fixture, run_sweep

pytestmark = pytest.mark.slow

GRID = ["-m", "sampler=static", *TINY, "study.reuse=false", "study.heartbeat_interval=1"]


def db_env(server: Postgres) -> dict[str, str]:
    return {"RECDIFF_FAULT_DB_STOP": server.stop_cmd, "RECDIFF_FAULT_DB_START": server.start_cmd}


@pytest.mark.slow
@requires_fixture
def test_a_search_rides_out_its_database_restarting_between_and_during_trials(tmp_path, postgres):
    """One storage object over three trials; the server restarts during every trial (a heartbeat meets it down) and
    again after every trial is recorded (the pool's connections are dead): the sweep reconnects and finishes."""
    proc = run_sweep(["study=search", "study.name=restarts", f"study.storage={postgres.url}",
                      f"study.artifact_dir={tmp_path}/art", "sampler=static", "study.search=[r]", "study.space.r.low=1",
                      "study.space.r.high=64", "study.algorithm=random", "study.seed=3", "study.n_trials=3",
                      "study.heartbeat_interval=1", "study.grace_period=30", *TINY, f"hydra.run.dir={tmp_path}/run",
                      *fault_args("db_restart")], env=db_env(postgres), timeout=600)
    assert proc.stdout.count("connection lost") >= 3 and proc.stdout.count("reconnected") >= 3
    assert "Traceback" not in proc.stderr + proc.stdout
    study = load(postgres.url, "restarts")
    assert len(exactly_once(study)) == 3 and [t.state for t in study.get_trials()] == [TrialState.COMPLETE] * 3


@pytest.mark.slow
@requires_fixture
def test_a_database_gone_for_longer_than_the_grace_period_stops_the_sweep_in_one_line(tmp_path, postgres):
    grid = [*GRID, "sampler.r=1,2", "study.name=gone", f"study.storage={postgres.url}", "study.grace_period=3",
            f"study.artifact_dir={tmp_path}/art"]
    proc = run_sweep([*grid, f"hydra.sweep.dir={tmp_path}/one", *fault_args(None, "db_down", jobs=False)],
                     env=db_env(postgres), check=False, timeout=600)
    postgres.start()
    assert proc.returncode == 1
    line = one_line(proc)
    assert line.startswith(f"error: storage {postgres.url} unreachable for 3 s (connection to server at ")
    assert line.endswith("): the sweep stopped; what it recorded is kept: run the same command again once the "
                         "storage answers")
    assert [t.state for t in load(postgres.url, "gone").get_trials()] == [TrialState.COMPLETE, TrialState.RUNNING]
    run_sweep([*grid, f"hydra.sweep.dir={tmp_path}/two"], timeout=600)
    study = load(postgres.url, "gone")
    assert sorted(t.params["r"] for t in exactly_once(study).values()) == [1, 2]
    assert study.trials[1].state == TrialState.FAIL and study.trials[1].user_attrs["fail_kind"] == "worker_died"


class SmallDisk:
    """A filesystem a test can fill: a 4 MiB tmpfs (root); where none can be mounted (or RECDIFF_TEST_NO_MOUNT is
    set), a folder whose file is capped by a file-size limit (``fill_disk`` in tests/faults.py)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir()
        self.why_not = "RECDIFF_TEST_NO_MOUNT is set" if os.environ.get("RECDIFF_TEST_NO_MOUNT") else "not root"
        if os.geteuid() == 0 and not os.environ.get("RECDIFF_TEST_NO_MOUNT"):
            tried = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(path)], capture_output=True,
                                   text=True)
            self.why_not = tried.stderr.strip() if tried.returncode else ""
        self.mounted = not self.why_not

    def fill(self) -> None:
        fill_disk(str(self.path))

    def free(self) -> None:
        (self.path / "filler").unlink(missing_ok=True)

    def remove(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)


@pytest.fixture
def disk(tmp_path):
    d = SmallDisk(tmp_path / "small")
    try:
        yield d
    finally:
        d.remove()


@pytest.mark.slow
@requires_fixture
def test_artifacts_on_a_full_disk_fail_the_trials_naming_the_path_until_there_is_room(tmp_path, disk):
    if not disk.mounted:   # a file-size limit is per process: the journal, larger than any artifact, would hit it first
        pytest.skip(f"needs a small tmpfs, which cannot be mounted here ({disk.why_not})")
    art = disk.path / "artifacts"
    grid = [*GRID, "sampler.r=1,2", "study.name=full", f"study.storage={tmp_path}/journal.log",
            f"study.artifact_dir={art}"]
    disk.fill()
    proc = run_sweep([*grid, f"hydra.sweep.dir={tmp_path}/one"], check=False, timeout=600)
    assert proc.returncode == 1
    assert one_line(proc) == f"error: no trial of this sweep completed (2 FAIL); see {tmp_path}/one"
    failed = load(str(tmp_path / "journal.log"), "full").get_trials()
    assert [t.state for t in failed] == [TrialState.FAIL] * 2
    for t in failed:
        assert t.values is None and t.user_attrs["fail_kind"] == "artifacts"
        assert t.user_attrs["fail_reason"] == f"cannot store artifacts in {art}: no space left on device"
    disk.free()
    run_sweep([*grid, f"hydra.sweep.dir={tmp_path}/two"], timeout=600)
    study = load(str(tmp_path / "journal.log"), "full")
    assert sorted(t.params["r"] for t in exactly_once(study).values()) == [1, 2]


@pytest.mark.slow
@requires_fixture
def test_a_journal_on_a_full_disk_stops_the_sweep_in_one_line_and_stays_readable(tmp_path, disk):
    journal = disk.path / "journal.log"
    grid = [*GRID, "sampler.r=1,2", "study.name=jfull", f"study.storage={journal}",
            f"study.artifact_dir={tmp_path}/art"]
    # the disk fills while the second configuration is measured: its record cannot be written
    proc = run_sweep([*grid, f"hydra.sweep.dir={tmp_path}/one", *fault_args(None, "fill_disk", jobs=False)],
                     env={"RECDIFF_FAULT_FILL": str(disk.path if disk.mounted else journal)}, check=False, timeout=600)
    assert proc.returncode == 1
    why = "no space left on device" if disk.mounted else "no space: the file size limit is reached (file too large)"
    assert one_line(proc) == (f"error: journal {journal}: cannot write ({why}): the sweep stopped; the journal is "
                              "intact: run the same command again once there is room")
    assert find_damage(journal) is None and not Path(f"{journal}.fragments").exists()
    assert journal.read_bytes().endswith(b"}\n")                    # no half-written record
    assert [t.state for t in load(str(journal), "jfull").get_trials()] == [TrialState.COMPLETE, TrialState.RUNNING]
    disk.free()
    run_sweep([*grid, f"hydra.sweep.dir={tmp_path}/two"], timeout=600)
    study = load(str(journal), "jfull")
    assert sorted(t.params["r"] for t in exactly_once(study).values()) == [1, 2]
