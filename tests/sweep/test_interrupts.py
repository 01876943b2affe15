"""An interrupt at an awkward moment (issue 52): while sweep.py loads its libraries, or inside a callback that Python
runs on its own (a weak reference's, a finalizer), where a KeyboardInterrupt would be printed as "Exception ignored"
and lost. Either way: one line or none, no traceback, and the interrupt is not lost."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from tests.sweep_helpers import REPO

pytestmark = pytest.mark.slow

CALLBACK = """
import os, signal, sys, time, weakref
from recdiff.study.interrupt import interrupt_on_sigterm
interrupt_on_sigterm()
class A: pass
def cb(ref):
    os.kill(os.getpid(), signal.SIGINT)   # lands inside the callback, where Python cannot raise it
    for _ in range(100000): pass
a = A(); r = weakref.ref(a, cb)
try:
    del a
    time.sleep(5)
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted")
"""


def test_an_interrupt_inside_a_callback_is_delivered_again_without_a_traceback():
    proc = subprocess.run([sys.executable, "-c", CALLBACK], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "interrupted" and proc.stderr == ""


def test_an_interrupt_while_sweep_py_loads_is_one_line_and_exit_130():
    proc = subprocess.Popen([sys.executable, "sweep.py", "--help"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)   # torch, hydra and the schemas take seconds to import
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err == "error: interrupted\n", (proc.returncode, err[-2000:])


def test_an_error_raised_while_unwinding_from_an_interrupt_is_the_interrupt():
    from recdiff.study.interrupt import interrupted

    def cleanup_fails_on_the_way_out():
        try:
            raise KeyboardInterrupt
        finally:
            None._invalidate_flags_cache()   # as a library's cleanup did under a soak: an AttributeError instead

    with pytest.raises(AttributeError) as caught:
        cleanup_fails_on_the_way_out()
    assert interrupted(caught.value)
    assert not interrupted(AttributeError("a plain error")) and interrupted(KeyboardInterrupt())
