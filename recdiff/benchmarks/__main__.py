"""``python -m recdiff.benchmarks selfcheck [--workers N]`` | ``python -m recdiff.benchmarks list``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m recdiff.benchmarks")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sc = sub.add_parser("selfcheck", help="run HumanEval canonical solutions and hostile programs through the executor")
    sc.add_argument("--workers", type=int, default=2)
    sub.add_parser("list", help="list the registered benchmarks")
    args = ap.parse_args(argv)
    if args.cmd == "list":
        from recdiff.benchmarks import available

        print("\n".join(available()))
        return 0
    from recdiff.benchmarks.selfcheck import main as selfcheck

    return selfcheck(workers=args.workers)


if __name__ == "__main__":
    sys.exit(main())
