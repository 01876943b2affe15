"""A trial's time limit (recdiff.trial.deadline) that falls inside an import: the import finishes and the limit is
raised just after it. Raised inside, it would leave the package half-imported for the rest of the process (its
submodule kept, bound to a parent that never finished: scipy.stats in a tune, every later trial failing).

No wall clock is read here: each test asserts where the limit landed (inside or after the import, from what the
module had run by then), which a loaded machine does not change."""

from __future__ import annotations

import sys
import time

import pytest

from recdiff.trial.deadline import TrialTimeout, deadline

PARENT = """from . import part   # the submodule binds this module before the rest of it has run
import time
time.sleep(0.5)             # the limit (0.1 s) falls here
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
    imported = False
    with pytest.raises(TrialTimeout), deadline(0.1):
        import slowpkg  # noqa: F401
        imported = True
        for _ in range(6000):               # the trial goes on after the import: the limit ends it here
            time.sleep(0.01)
        pytest.fail("the limit never came")
    assert imported                         # raised once the import was over, not in it
    import slowpkg

    assert slowpkg.part.done() is True      # the process can use the package, as it could without a limit


def test_an_import_that_outlasts_the_grace_is_cut_all_the_same(tmp_path, monkeypatch):
    from recdiff.trial import deadline as module

    # an import that would run for 60 s: cut after the limit and its grace, it never reaches its end
    (tmp_path / "hangs.py").write_text("import time\nfor _ in range(6000):\n    time.sleep(0.01)\nDONE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "hangs", raising=False)
    monkeypatch.setattr(module, "IMPORT_GRACE_S", 0.2)
    with pytest.raises(TrialTimeout), deadline(0.1):
        import hangs  # noqa: F401
    assert "hangs" not in sys.modules       # the import was cut, not waited for
