"""Grade math answers with math-verify in worker processes (see ``_math_worker.py`` for why)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from recdiff.benchmarks import Score

_WORKER = str(Path(__file__).with_name("_math_worker.py"))
_STARTUP_S = 60.0   # importing sympy + math-verify on a loaded machine
_PER_ITEM_S = 25.0  # math-verify's own alarms cap one item at ~10 s (parse + verify)


def _run_chunk(items: list[tuple[int, str, str]], out: dict[int, dict]) -> None:
    proc = subprocess.Popen([sys.executable, "-I", _WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        stdout, _ = proc.communicate(json.dumps([[g, p] for _, g, p in items]),
                                     timeout=_STARTUP_S + _PER_ITEM_S * len(items))
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, _ = proc.communicate()
    lines = stdout.splitlines()
    for k, (i, _, _) in enumerate(items):
        try:
            out[i] = json.loads(lines[k])
        except (IndexError, json.JSONDecodeError):
            out[i] = {"correct": False, "extracted": None, "error": "grader crashed or timed out"}


def grade(golds: list[str], preds: list[str], workers: int = 2) -> list[Score]:
    """math-verify ``verify(parse(gold), parse(pred))`` for each pair, gold first, in ``workers`` processes."""
    items = [(i, g, p) for i, (g, p) in enumerate(zip(golds, preds, strict=True))]
    if not items:
        return []
    n = max(1, min(workers, len(items)))
    out: dict[int, dict] = {}
    # Threads only wait on the worker processes; the grading itself runs in their main threads.
    threads = [threading.Thread(target=_run_chunk, args=(items[k::n], out)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    scores = []
    for i in range(len(items)):
        r = out[i]
        detail = {k: v for k, v in r.items() if k not in ("correct", "extracted")}
        scores.append(Score(correct=bool(r["correct"]), extracted=r.get("extracted"), detail=detail))
    return scores
