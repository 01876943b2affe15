"""A trial's time limit (recdiff.trial.deadline) that falls inside an import: the import finishes and the limit is
raised just after it. Raised inside, it would leave the package half-imported for the rest of the process (its
submodule kept, bound to a parent that never finished: scipy.stats in a tune, every later trial failing)."""

from __future__ import annotations

import sys
import time

import pytest

from recdiff.trial.deadline import TrialTimeout, deadline

PARENT = """from . import part   # the submodule binds this module before the rest of it has run
import time
time.sleep(0.5)
DONE = True
"""
PART = """import slowpkg as parent

def done():
    return parent.DONE
"""


def test_a_limit_that_falls_inside_an_import_is_raised_after_it(tmp_path, monkeypatch):
    (tmp_path / "slowpkg").mkdir()
    (tmp_path / "slowpkg" / "__init__.py").write_text(PARENT)
    (tmp_path / "slowpkg" / "part.py").write_text(PART)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("slowpkg", "slowpkg.part"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    began = time.monotonic()
    with pytest.raises(TrialTimeout), deadline(0.1):
        import slowpkg  # noqa: F401
        time.sleep(10)                      # the trial goes on after the import: the limit ends it here
    took = time.monotonic() - began
    import slowpkg

    assert slowpkg.part.done() is True      # the process can use the package, as it could without a limit
    assert 0.5 <= took < 5                  # raised once the import was over, not in it


def test_an_import_that_outlasts_the_grace_is_cut_all_the_same(tmp_path, monkeypatch):
    from recdiff.trial import deadline as module

    (tmp_path / "hangs.py").write_text("import time\ntime.sleep(10)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "hangs", raising=False)
    monkeypatch.setattr(module, "IMPORT_GRACE_S", 0.2)
    began = time.monotonic()
    with pytest.raises(TrialTimeout), deadline(0.1):
        import hangs  # noqa: F401
    assert time.monotonic() - began < 2             # the limit plus its grace, not the import's 10 s
