"""Standalone math-verify grader, run as ``python -I _math_worker.py``; not imported by recdiff.

math-verify bounds each parse/verify with ``signal.alarm``, which only works in the main thread of a
process, so grading happens here, in the main thread of a fresh interpreter (which also keeps torch
and CUDA out of the grading processes).  Input on stdin: a JSON list of ``[gold, prediction]``; output:
one JSON line per item, in order, flushed as soon as it is graded (the parent keeps what arrived if it
has to kill us).
"""

import json
import sys


def wrap_gold(gold: str) -> str:
    # A bare gold answer ("2\sqrt{2}") is not found by math-verify's LaTeX extractor without math
    # delimiters and falls back to the expression extractor, which reads "2"; wrap it as $...$.
    return gold if ("$" in gold or "\\boxed" in gold or "\\(" in gold or "\\[" in gold) else f"${gold}$"


def main() -> None:
    from math_verify import parse, verify

    items = json.load(sys.stdin)
    for gold, pred in items:
        try:
            g = parse(wrap_gold(gold))
            p = parse(pred)
            ok = bool(g) and bool(p) and bool(verify(g, p))
            out = {"correct": ok, "extracted": str(p[-1]) if p else None, "gold_parsed": str(g[-1]) if g else None}
        except Exception as e:  # noqa: BLE001 - a grading error is a wrong answer, with the reason kept
            out = {"correct": False, "extracted": None, "error": f"{type(e).__name__}: {e}"[:300]}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
