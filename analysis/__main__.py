"""python -m analysis {report,notebooks,trials} <study or dir> | paper [--scale ci|full] — see analysis/README.md."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from recdiff.errors import RecdiffError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    help_src = "storage URL (sqlite:///…, postgresql://…), journal/SQLite file, sweep output dir, or study name"
    for name, text in (("report", "all figures, Table 1 and report.md into outputs/<study>/"),
                       ("notebooks", "execute the figure notebooks into outputs/<study>/notebooks/"),
                       ("trials", "print the trials table (or write it with -o .parquet/.csv)")):
        p = sub.add_parser(name, help=text)
        p.add_argument("source", help=help_src)
        p.add_argument("--study-name", default=None, help="study to pick when the storage holds several")
        p.add_argument("-o", "--out", type=Path, default=None, help="output dir (file for `trials`)")
        if name == "report":
            p.add_argument("--formats", default="png,pdf", help="figure formats, comma-separated")
        if name == "notebooks":
            p.add_argument("--only", action="append", default=None, help="notebook name (repeatable)")
    p = sub.add_parser("paper", help="run every sweeps/ recipe on the embedded default; figures, tables, report.md "
                                     "with the paper's claims and computed verdicts")
    p.add_argument("--out", "-o", type=Path, default=Path("outputs/paper"), help="output dir (default outputs/paper)")
    p.add_argument("--scale", default="ci",
                   help="ci (sized for ≤ 15 min on 2 cores, default) | full (≤ 60 min) | smoke (tests)")
    p.add_argument("--only", action="append", default=None, help="recipe name (repeatable): run only these")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="Hydra override for every sweep, e.g. run.threads=1 (repeatable)")
    args = parser.parse_args(argv)
    try:
        if args.command == "paper":
            from recdiff.tools.paper import run_paper
            return run_paper(args.out, args.scale, args.only, args.override)
        if args.command == "report":
            from analysis.report import write_report
            write_report(args.source, args.out, study_name=args.study_name,
                         formats=[f for f in args.formats.split(",") if f])
        elif args.command == "notebooks":
            from analysis import notebooks
            paper = (Path(args.source) / "paper.json").is_file()   # the folder of `python -m analysis paper`
            names = args.only or (["paper"] if paper else [n for n in notebooks.available() if n != "paper"])
            out = args.out or (Path(args.source) / "notebooks" if paper else None)
            for i, name in enumerate(names, 1):
                path = notebooks.render(name, args.source, out, study_name=args.study_name)
                print(f"[{i}/{len(names)}] {name}: {path}")
        else:
            from analysis.trials import load_trials
            df = load_trials(args.source, args.study_name)
            if args.out is None:
                import polars as pl
                with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=200):
                    print(df.drop("trace_paths"))
            elif args.out.suffix == ".csv":
                df.drop("trace_paths").write_csv(args.out)
            else:
                df.write_parquet(args.out)
    except RecdiffError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
