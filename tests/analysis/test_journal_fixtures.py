"""Journals written by earlier code still load into ``python -m analysis report`` with the same tables.

``data/journal-e1a58b8.log`` was written by the code of commit e1a58b8 (before the trial record was declared in
:mod:`recdiff.trial.record`), on the embedded model, by::

    python sweep.py -m sampler.r_inner=1,2 study.name=current benchmark.limit=4 run.max_new_tokens=26 \\
        run.speed_samples=1 run.warmup=0 run.threads=1 run.progress=false \\
        study.storage=/tmp/fx/journal.log study.artifact_dir=/tmp/fx/art hydra.sweep.dir=/tmp/fx/sweep

(the 6 baselines, LoopSpec's among them, and 2 grid trials). ``data/report-<commit>-<study>/`` hold the tables that
``python -m analysis report`` wrote from each journal with the code of e1a58b8, without the per-sample files (as
here: the journal's trials point at /tmp/fx, which the tests do not have). The journal of b3d7e8b is the one of
``tests/study/test_old_journal.py`` (before the typed plan and paired timing).
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest

from analysis.__main__ import main

DATA = Path(__file__).parent / "data"
JOURNALS = [
    (DATA / "journal-e1a58b8.log", "current", DATA / "report-e1a58b8-current"),
    (DATA.parents[1] / "study" / "data" / "journal-b3d7e8b.log", "old", DATA / "report-b3d7e8b-old"),
    (DATA.parents[1] / "study" / "data" / "journal-b3d7e8b.log", "old-search", DATA / "report-b3d7e8b-old-search"),
]


@pytest.mark.parametrize(("journal", "study", "expected"), JOURNALS, ids=[s for _, s, _ in JOURNALS])
def test_an_earlier_journal_reports_the_same_tables(journal, study, expected, tmp_path, capsys):
    copy = tmp_path / "journal.log"
    shutil.copy(journal, copy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # the per-sample files it names are not here
        rc = main(["report", str(copy), "--study-name", study, "-o", str(tmp_path / "report"), "--formats", "png"])
    assert rc == 0, capsys.readouterr().err
    tables = sorted(p.name for p in expected.glob("*.md"))
    assert tables
    for name in tables:
        assert (tmp_path / "report" / name).read_text() == (expected / name).read_text(), name
