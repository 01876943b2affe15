"""python -m recdiff.study repair JOURNAL — back up a damaged journal file and drop only its incomplete records."""

from __future__ import annotations

import argparse
import sys

from recdiff.errors import RecdiffError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recdiff.study", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("repair", help="back up JOURNAL, then drop its incomplete records (interrupted writes)")
    p.add_argument("journal", help="an Optuna journal file (study.storage)")
    args = parser.parse_args(argv)
    from recdiff.study.journal import repair

    try:
        print(repair(args.journal))
    except RecdiffError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
