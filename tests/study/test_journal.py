"""Journal files that a killed writer or a full disk cut short: still readable and appendable, damage named in one
line, and a repair that backs up the file and drops only incomplete records."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from recdiff.errors import RecdiffError
from recdiff.study import open_storage
from recdiff.study.journal import repair
from tests.sweep_helpers import REPO, requires_fixture, run_sweep

FRAGMENT = b'{"op_code":5,"worker_id":"dead-beef","trial_id":0,"st'   # a record cut mid-write


def plain_optuna(path: Path) -> optuna.Study:
    """The study as Optuna alone reads it (what the dashboard and `optuna.load_study` see)."""
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    return optuna.load_study(study_name="j", storage=storage)


def add(path: Path, value: float) -> None:
    study = optuna.create_study(study_name="j", storage=open_storage(str(path)), directions=["maximize"],
                                load_if_exists=True)
    study.add_trial(optuna.trial.create_trial(value=value, params={}, distributions={}))


def insert_line(path: Path, after: int, line: bytes) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines[:after], line + b"\n", *lines[after:]]))


def glued_journal(path: Path) -> None:
    """What appending with Optuna's own backend did after an interrupted write: the next record glued onto the
    fragment, then one more record."""
    add(path, 1.0)
    with open(path, "ab") as f:
        f.write(FRAGMENT)
    backend = optuna.storages.journal.JournalFileBackend(str(path))
    study = optuna.load_study(study_name="j", storage=optuna.storages.JournalStorage(backend))
    for v in (2.0, 3.0):
        try:
            study.add_trial(optuna.trial.create_trial(value=v, params={}, distributions={}))
        except (AttributeError, ValueError):   # Optuna lost its own record (glued away), then cannot read the file
            pass


def test_a_cut_off_record_is_not_glued_to_and_the_file_stays_readable(tmp_path):
    path = tmp_path / "journal.log"
    add(path, 1.0)
    with open(path, "ab") as f:
        f.write(FRAGMENT)
    add(path, 2.0)
    add(path, 3.0)
    assert [t.value for t in plain_optuna(path).trials] == [1.0, 2.0, 3.0]
    assert (tmp_path / "journal.log.fragments").read_bytes() == FRAGMENT + b"\n"   # moved aside, not lost


def test_a_complete_last_record_missing_its_newline_is_kept(tmp_path):
    path = tmp_path / "journal.log"
    add(path, 1.0)
    add(path, 2.0)
    path.write_bytes(path.read_bytes()[:-1])   # the write stopped right before the newline
    add(path, 3.0)
    assert [t.value for t in plain_optuna(path).trials] == [1.0, 2.0, 3.0]


@pytest.mark.slow
@requires_fixture
def test_damage_is_one_line_naming_the_file_and_the_line(tmp_path):
    path = tmp_path / "journal.log"
    glued_journal(path)
    lines = path.read_bytes().splitlines()
    bad = next(i for i, line in enumerate(lines, 1) if line.startswith(FRAGMENT))
    with pytest.raises(RecdiffError,
                       match=rf"journal {path} is damaged at line {bad}: .*python -m recdiff.study repair"):
        open_storage(str(path))
    # the analysis CLI and the sweep say the same, in one line, without a traceback
    proc = subprocess.run([sys.executable, "-m", "analysis", "trials", str(path)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"error: journal {path} is damaged at line {bad}: a record cut short by an interrupted write, with a later "
        f"record glued onto it; run `python -m recdiff.study repair {path}`"]
    sweep = run_sweep([f"study.storage={path}", f"study.artifact_dir={tmp_path}/art", f"hydra.run.dir={tmp_path}/run",
                       "model=fixture", "benchmark.limit=1"], check=False, timeout=120)
    assert sweep.returncode == 2 and sweep.stderr.strip().splitlines() == [
        f"error: journal {path} is damaged at line {bad}: "
        "a record cut short by an interrupted write, with a later record glued onto it; "
        f"run `python -m recdiff.study repair {path}`"], sweep.stderr[-2000:]


def test_a_line_that_is_no_record_is_named_too(tmp_path):
    path = tmp_path / "journal.log"
    add(path, 1.0)
    add(path, 2.0)
    insert_line(path, 2, b'["not", "a record"]')
    with pytest.raises(RecdiffError,
                       match=rf"journal {path} is damaged at line 3: not a journal record; repair cannot"):
        open_storage(str(path))


@pytest.mark.slow
def test_repair_backs_up_and_drops_only_incomplete_records(tmp_path):
    path = tmp_path / "journal.log"
    glued_journal(path)
    with open(path, "ab") as f:
        f.write(FRAGMENT)                                    # and a cut-off tail
    original = path.read_bytes()
    proc = subprocess.run([sys.executable, "-m", "recdiff.study", "repair", str(path)], capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    backups = list(tmp_path.glob("journal.log.*.bak"))
    assert len(backups) == 1 and backups[0].read_bytes() == original and str(backups[0]) in proc.stdout
    assert "dropped the incomplete records at line" in proc.stdout
    # every complete record survives: the one glued onto the fragment too (Optuna reads all three trials)
    study = plain_optuna(path)
    assert [t.value for t in study.trials] == [1.0, 2.0, 3.0]
    assert all(t.state == TrialState.COMPLETE for t in study.trials)
    assert len(path.read_bytes().splitlines()) == len(original.splitlines()) - 1   # only the tail line is gone
    assert str(repair(path)).endswith("nothing to repair")


def test_repair_refuses_to_drop_a_complete_line(tmp_path):
    path = tmp_path / "journal.log"
    add(path, 1.0)
    add(path, 2.0)
    insert_line(path, 2, b'{"some": "other json"}')
    before = path.read_bytes()
    with pytest.raises(RecdiffError, match=r"line 3 is not a journal record and not an incomplete one: not repaired"):
        repair(path)
    assert path.read_bytes() == before and not list(tmp_path.glob("*.bak"))

