"""Opening the storage rides out an outage too (issue 52): a sweep that starts while its PostgreSQL server is down
waits for it for up to the grace period, as every later storage call does; past it, one line "storage ...
unreachable" and exit code 1. A server that answers and refuses (a database that does not exist) is bad input: exit
code 2 at once."""

from __future__ import annotations

import time

import pytest
from optuna.trial import TrialState

from tests.sweep_helpers import TINY, load, one_line, popen_sweep, requires_fixture, run_sweep

pytestmark = pytest.mark.slow

GRID = ["-m", "sampler=static", "sampler.r=1", *TINY, "study.reuse=false", "study.heartbeat_interval=1"]


@pytest.mark.slow
@requires_fixture
def test_a_sweep_started_while_its_database_is_down_waits_for_it(tmp_path, postgres):
    postgres.stop()
    log = tmp_path / "sweep.log"
    proc = popen_sweep([*GRID, "study.name=opening", f"study.storage={postgres.url}", "study.grace_period=60",
                        f"study.artifact_dir={tmp_path}/art", f"hydra.sweep.dir={tmp_path}/sweep"], log=log)
    try:
        # the server comes back once the sweep has met it down (however long the sweep takes to start on a busy
        # machine), well within the grace period
        deadline = time.monotonic() + 50
        while "connection lost" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        postgres.start()
        assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]
    finally:
        proc.kill()
    out = log.read_text()
    assert "connection lost" in out and "reconnected" in out
    assert "Traceback" not in out
    assert [t.state for t in load(postgres.url, "opening").get_trials()] == [TrialState.COMPLETE]


@pytest.mark.slow
@requires_fixture
def test_a_database_down_for_longer_than_the_grace_period_at_the_start_is_one_line_and_exit_1(tmp_path, postgres):
    postgres.stop()
    try:
        proc = run_sweep([*GRID, "study.name=never", f"study.storage={postgres.url}", "study.grace_period=2",
                          f"study.artifact_dir={tmp_path}/art", f"hydra.sweep.dir={tmp_path}/sweep"], check=False,
                         timeout=600)
    finally:
        postgres.start()
    assert proc.returncode == 1
    line = one_line(proc)
    assert line.startswith(f"error: storage {postgres.url} unreachable for 2 s (connection to server at ")
    assert line.endswith("): the sweep stopped; what it recorded is kept: run the same command again once the "
                         "storage answers")


@pytest.mark.slow
@requires_fixture
def test_a_database_that_does_not_exist_is_bad_input_at_once(tmp_path, postgres):
    url = postgres.url.rsplit("/", 1)[0] + "/nope"
    proc = run_sweep([*GRID, "study.name=nope", f"study.storage={url}", "study.grace_period=600",
                      f"study.artifact_dir={tmp_path}/art", f"hydra.sweep.dir={tmp_path}/sweep"], check=False,
                     timeout=300)
    assert proc.returncode == 2
    assert one_line(proc) == f'error: cannot open storage {url}: (psycopg2.OperationalError) connection to server ' \
                             f'at "127.0.0.1", port {postgres.port} failed: FATAL: database "nope" does not exist'
