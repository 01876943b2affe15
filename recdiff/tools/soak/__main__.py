"""``python -m recdiff.tools.soak``: a sweep under a seeded fault schedule, then the exactly-once verdict.

    python -m recdiff.tools.soak                                   # 4 workers, 16 configurations, a journal
    python -m recdiff.tools.soak --storage postgres --seed 3       # a throwaway PostgreSQL server, restarted too
    python -m recdiff.tools.soak --workers 8 --storage postgres --window 540 --kills 12 --pauses 8 --restarts 8 \\
        --grid sampler.r_inner=1,2,3,4,6,8,12,16 sampler.beta=0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9 \\
        -- benchmark.limit=8 run.max_new_tokens=16

Exit status 0 when every check passes, 1 when one fails, 2 for bad input. Writes ``soak.json`` and ``verdict.txt``
in ``--out`` with the workers' logs (docs/sweeps.md, "Soak").
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
from pathlib import Path

from recdiff.study import interrupt_on_sigterm, shown
from recdiff.tools.soak.chaos import Chaos, Claims
from recdiff.tools.soak.schedule import KINDS, make_schedule
from recdiff.tools.soak.verdict import grid_points, judge, table
from recdiff.tools.soak.workers import Fleet

REPO = Path(__file__).resolve().parents[3]
GRID = ["sampler.r_inner=1,2,4,8", "sampler.beta=0,0.2,0.4,0.6"]
# Each trial tiny (a few problems, a few tokens, one timing round pair): the soak tests the sweep, not the model.
TRIAL = ["benchmark.limit=4", "run.max_new_tokens=8", "run.speed_samples=1", "run.repeats=2", "run.warmup=0",
         "run.n_traces=1", "run.progress=false", "run.threads=1", "study.baselines=false"]


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    p = argparse.ArgumentParser(prog="python -m recdiff.tools.soak", description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Overrides after `--` go to every worker's sweep command.")
    p.add_argument("--workers", type=int, default=4, help="local worker processes (default 4)")
    p.add_argument("--storage", default="journal",
                   help="journal (a journal file in --out), postgres (a throwaway local server, restarted by the "
                        "schedule), or a postgresql:// URL (restarted with --restart-cmd)")
    p.add_argument("--restart-cmd", default=None, help="shell command that restarts the server of a URL --storage")
    p.add_argument("--grid", nargs="+", default=GRID, metavar="KEY=V1,V2",
                   help=f"the sweep (default: {' '.join(GRID)})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--window", type=float, default=60.0,
                   help="seconds over which the kills, pauses and restarts are drawn (default 60)")
    p.add_argument("--kills", type=int, default=2)
    p.add_argument("--pauses", type=int, default=1)
    p.add_argument("--restarts", type=int, default=None, help="default: 1 with a server to restart, else 0")
    p.add_argument("--no-interrupt", action="store_true",
                   help="no SIGINT of the whole sweep (by default one, once a third to two thirds of the grid is done)")
    p.add_argument("--grace-s", type=int, default=10, help="study.grace_period (default 10)")
    p.add_argument("--heartbeat-s", type=int, default=1, help="study.heartbeat_interval (default 1)")
    p.add_argument("--pause-s", type=float, default=None, help="how long a paused worker stays stopped "
                                                                "(default: the grace period + 4 s)")
    p.add_argument("--down-s", type=float, default=1.0,
                   help="how long the local server stays down in a restart (default 1)")
    p.add_argument("--max-retry", type=int, default=5, help="study.max_retry (default 5)")
    p.add_argument("--respawn-s", type=float, default=2.0, help="a killed worker starts again after this (default 2)")
    p.add_argument("--timeout-s", type=float, default=3600.0, help="the whole soak at most (default 3600)")
    p.add_argument("--out", type=Path, default=None, help="default outputs/soak/<time>")
    p.add_argument("--study", default=None, help="the study's name (default soak-<seed>-<time>); soaks on several "
                                                 "nodes share one study by naming it")
    p.add_argument("--verdict-only", action="store_true",
                   help="no workers, no faults: the verdict of --study in --storage (after soaks on several nodes)")
    args = p.parse_args(argv)
    axes = []
    for item in args.grid:
        key, sep, values = item.partition("=")
        if not sep or not values:
            p.error(f"--grid {item!r}: want KEY=V1,V2,...")
        axes.append((key, values.split(",")))
    args.axes = axes
    args.pause_s = args.grace_s + 4.0 if args.pause_s is None else args.pause_s
    if args.pause_s <= args.grace_s:
        p.error(f"--pause-s {args.pause_s:g} must exceed the grace period ({args.grace_s} s): a pause must outlast "
                "the claim")
    if args.workers < 1:
        p.error("--workers must be at least 1")
    if args.verdict_only and args.storage == "postgres":
        p.error("--verdict-only reads an existing study: --storage journal (in --out) or a postgresql:// URL")
    return args, extra


def worker_command(args: argparse.Namespace, extra: list[str], url: str, name: str, out: Path, slot: int) -> list[str]:
    """A worker's sweep command: the grid's values in the worker's own (seeded) order."""
    rng = random.Random(args.seed * 1009 + slot)
    grid = []
    for key, values in args.axes:
        order = list(values)
        rng.shuffle(order)
        grid.append(f"{key}={','.join(order)}")
    keys = {e.split("=", 1)[0] for e in extra}
    trial = [t for t in TRIAL if t.split("=", 1)[0] not in keys]
    return [sys.executable, str(REPO / "sweep.py"), "-m", *grid, *trial, *extra, f"study.storage={url}",
            f"study.name={name}", f"study.artifact_dir={out / 'artifacts'}",
            f"study.heartbeat_interval={args.heartbeat_s}", f"study.grace_period={args.grace_s}",
            f"study.max_retry={args.max_retry}", f"hydra.sweep.dir={out}/sweeps/w{slot}/" "${now:%H-%M-%S-%f}"]


def main(argv: list[str] | None = None) -> int:
    args, extra = parse(list(sys.argv[1:] if argv is None else argv))
    logging.getLogger("recdiff.study").setLevel(logging.ERROR)   # the soak's own looks at the study: no outage lines
    interrupt_on_sigterm()   # a SIGTERM ends the soak as Ctrl-C does: its workers and its server go with it
    out = (args.out or Path("outputs/soak") / time.strftime("%Y-%m-%d/%H-%M-%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()

    def say(line: str) -> None:
        print(f"[soak +{time.monotonic() - began:6.1f}s] {line}", flush=True)

    server, restart = None, None
    if args.storage == "journal":
        url = str(out / "journal.log")
    elif args.storage == "postgres":
        from recdiff.tools.soak.postgres import Postgres, server_binaries

        bindir = server_binaries()
        if bindir is None:
            print("error: --storage postgres needs PostgreSQL's server binaries (Debian: apt-get install postgresql)",
                  file=sys.stderr)
            return 2
        server = Postgres(bindir, max_connections=20 + 10 * args.workers)
        server.start()
        url = server.url

        def restart(down_s: float) -> None:
            server.stop()
            time.sleep(down_s)
            server.start()
    elif args.storage.startswith(("postgresql://", "postgres://")):
        url = args.storage
        if args.restart_cmd:
            import subprocess

            def restart(down_s: float) -> None:
                subprocess.run(args.restart_cmd, shell=True, check=True, capture_output=True, timeout=120)
    else:
        print(f"error: --storage {args.storage!r}: want journal, postgres or a postgresql:// URL", file=sys.stderr)
        return 2
    restarts = args.restarts if args.restarts is not None else (1 if restart is not None else 0)
    schedule = make_schedule(args.seed, args.window, args.kills, args.pauses, restarts, not args.no_interrupt,
                             args.pause_s, args.down_s)
    name = args.study or f"soak-{args.seed}-{time.strftime('%H%M%S')}"
    if args.verdict_only:
        verdict = judge(final_trials(url, name), args.axes, [], [], args.max_retry)
        print(f"soak verdict of study {name} in {args.storage}\n{table(verdict, {})}", flush=True)
        return 0 if verdict.passed else 1
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    fleet = Fleet(lambda slot: worker_command(args, extra, url, name, out, slot), args.workers, out / "logs", env,
                  REPO, args.respawn_s)
    chaos = Chaos(schedule, fleet, Claims(url, name), restart, args.grace_s, len(grid_points(args.axes)), say)
    say(f"{args.workers} workers, {len(list(schedule.faults))} faults over {args.window:g} s (seed {args.seed}), "
        f"study {name} in {shown(url)}; logs in {out / 'logs'}")
    timed_out = False
    try:
        fleet.start_run()
        while True:
            for w in fleet.poll():
                say(f"{w.name} (pid {w.pid}) ended: exit {w.rc}")
            chaos.tick()
            if fleet.settled():
                if fleet.interrupted_run == fleet.run:
                    say("the sweep was interrupted: the same command again")
                    fleet.start_run()
                    continue
                break
            if time.monotonic() - began > args.timeout_s:
                timed_out = True
                say(f"timed out after {args.timeout_s:g} s: every worker killed")
                fleet.kill_all()
                break
            time.sleep(0.2)
        chaos.finish()
        verdict = judge(final_trials(url, name), args.axes, fleet.workers, chaos.record, args.max_retry)
    except KeyboardInterrupt:
        fleet.kill_all()
        print("error: interrupted", file=sys.stderr)
        return 130
    finally:
        if server is not None:
            server.remove()
    if timed_out:
        verdict.checks["finished within --timeout-s"] = (False, f"{args.timeout_s:g} s")
    text = table(verdict, {k: schedule.count(k) for k in KINDS})
    took = time.monotonic() - began
    head = (f"soak: {len(verdict.rows)} configurations, {args.workers} workers, storage {args.storage}, seed "
            f"{args.seed}, {took:.0f} s, {fleet.run} run{'s' if fleet.run > 1 else ''} of the command, "
            f"{len(fleet.workers)} worker processes")
    print(f"\n{head}\n{text}", flush=True)
    (out / "verdict.txt").write_text(f"{head}\n{text}\n")
    (out / "soak.json").write_text(json.dumps({
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "extra": extra,
        "seconds": round(took, 1), "runs": fleet.run, "study": name, **verdict.to_json(),
        "workers": [{"name": w.name, "pid": w.pid, "rc": w.rc, "signals": w.signals} for w in fleet.workers],
    }, indent=2, default=str) + "\n")
    return 0 if verdict.passed else 1


def final_trials(url: str, name: str) -> list:
    from recdiff.study import open_storage

    storage = open_storage(url, patience_s=60)
    try:
        return storage.get_all_trials(storage.get_study_id_from_name(name))
    except KeyError:
        return []


if __name__ == "__main__":
    sys.exit(main())
