"""The soak's verdict: what became of every configuration, read from the study once the sweep has ended, and the
checks that nothing was lost or doubled.

One row per configuration of the grid (and per baseline the sweep recorded, and per configuration outside the grid):
COMPLETE once (possibly after failed attempts, named by kind: a worker killed or paused, an interrupted run), DOUBLED
(COMPLETE twice, or recorded under two ``config_hash`` values), or missing with the reason (still RUNNING, re-queued and
never run again, retries exhausted, failed, never claimed). A configuration is its parameters: trials of the same
parameters are one configuration whatever hash they were recorded under. The checks:

- every configuration COMPLETE exactly once, under one hash;
- no trial outside the grid (the baselines aside);
- no trial left RUNNING or WAITING;
- no result from a worker whose claim had been taken over: no trial failed as ``worker_died`` carries values or
  anything of a measurement, and every result a worker logged as dropped belongs to such a failed trial;
- no traceback in any worker's output, every worker that stopped with an error said so in one ``error:`` line, and
  none exited with the code of bad input (2);
- every scheduled fault landed (a fault that found nothing to land on tested nothing).
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from recdiff.study import CLAIMANT_ATTR
from recdiff.tools.soak.chaos import Landed
from recdiff.tools.soak.workers import Worker

MEASURED = ("n_samples", "accuracy_lo", "tokens_per_s_lo", "config")   # attributes only a measurement writes
DROPPED = re.compile(r"trial (\d+): this worker's claim was taken over")


@dataclass
class Row:
    config: str
    verdict: str
    trials: list[int]
    recorded_by: str = ""
    in_grid: bool = True      # a grid point or a baseline; False: a configuration the grid does not name

    @property
    def ok(self) -> bool:
        return self.in_grid and self.verdict.startswith("COMPLETE once")


@dataclass
class Verdict:
    rows: list[Row]
    checks: dict[str, tuple[bool, str]]
    faults: list[Landed]
    counts: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(ok for ok, _ in self.checks.values())

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "rows": [asdict(r) | {"ok": r.ok} for r in self.rows],
                "checks": {k: {"ok": ok, "detail": d} for k, (ok, d) in self.checks.items()},
                "faults": [asdict(f) for f in self.faults], "counts": self.counts}


def _norm(value: Any) -> Any:
    try:
        return round(float(value), 9)
    except (TypeError, ValueError):
        return str(value)


def grid_points(axes: list[tuple[str, list[str]]]) -> list[dict[str, str]]:
    """The grid's configurations: parameter name (the key's last part) → value, in the grid's order."""
    names = [key.rsplit(".", 1)[-1] for key, _ in axes]
    return [dict(zip(names, combo)) for combo in itertools.product(*(values for _, values in axes))]


def _label(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


def _configuration(t: FrozenTrial) -> tuple[Any, ...]:
    """What makes two trials one configuration: a baseline or not, and its parameters (normalised); its hash where it
    has none."""
    if not t.params:
        return ("hash", t.user_attrs.get("config_hash", f"trial {t.number}"))
    return bool(t.user_attrs.get("baseline")), tuple(sorted((k, _norm(v)) for k, v in t.params.items()))


def _row(label: str, trials: list[FrozenTrial], workers: dict[int, Worker], max_retry: int) -> Row:
    numbers = [t.number for t in trials]
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    hashes = sorted({str(t.user_attrs["config_hash"]) for t in trials if "config_hash" in t.user_attrs})
    if len(hashes) > 1:   # one configuration claimed under two hashes: its exactly-once rests on the hash
        return Row(label, f"DOUBLED: recorded under {len(hashes)} config hashes ({', '.join(hashes)}; COMPLETE "
                          f"×{len(complete)})", numbers)
    failed = Counter(t.user_attrs.get("fail_kind", "unknown") for t in trials if t.state == TrialState.FAIL)
    kinds = ", ".join(f"{k} ×{n}" for k, n in sorted(failed.items()))
    if len(complete) == 1:
        who = (complete[0].system_attrs.get(CLAIMANT_ATTR) or {}).get("pid")
        by = workers[who].name if who in workers else f"pid {who}"
        return Row(label, "COMPLETE once" + (f", retried after {kinds}" if kinds else ""), numbers, by)
    if len(complete) > 1:
        return Row(label, f"DOUBLED: COMPLETE ×{len(complete)} (trials {[t.number for t in complete]})", numbers)
    running = [t for t in trials if t.state == TrialState.RUNNING]
    if running:
        who = (running[0].system_attrs.get(CLAIMANT_ATTR) or {}).get("pid")
        return Row(label, f"missing: RUNNING (trial {running[0].number}, process {who})", numbers)
    if any(t.state == TrialState.WAITING for t in trials):
        return Row(label, "missing: re-queued (WAITING), never run again", numbers)
    if failed["worker_died"] > max_retry:
        return Row(label, f"missing: retries exhausted ({kinds}; study.max_retry={max_retry})", numbers)
    last = next((t for t in reversed(trials) if t.state == TrialState.FAIL), None)
    if last is not None:
        return Row(label, f"missing: FAIL ({last.user_attrs.get('fail_reason', 'no reason')})", numbers)
    return Row(label, "missing: never claimed" if not trials else "missing: only pruned duplicates", numbers)


def _logs(workers: list[Worker]) -> tuple[list[int], list[str], Counter]:
    """(trial numbers whose late results workers dropped, problems with what users saw, log line counts)."""
    dropped, problems, lines = [], [], Counter()
    for w in workers:
        out = w.out.read_text(errors="replace") if w.out.exists() else ""
        err = w.err.read_text(errors="replace") if w.err.exists() else ""
        dropped += [int(n) for n in DROPPED.findall(out + err)]
        lines["connection lost"] += (out + err).count("connection lost")
        lines["reconnected"] += (out + err).count("reconnected")
        if "Traceback" in out + err:
            problems.append(f"{w.name}: a traceback")
        last = [ln for ln in err.splitlines() if ln.strip()][-1:]
        if w.rc not in (0, None, -9) and not (last and last[0].startswith("error: ")):
            problems.append(f"{w.name}: exit {w.rc} without an error line")
        if w.rc == 2:   # the code of bad input: no fault of the soak is that
            problems.append(f"{w.name}: exit 2 ({last[0] if last else 'no line'})")
    return dropped, problems, lines


def judge(trials: list[FrozenTrial], axes: list[tuple[str, list[str]]], workers: list[Worker],
          faults: list[Landed], max_retry: int) -> Verdict:
    by_pid = {w.pid: w for w in workers}
    groups: dict[tuple[Any, ...], list[FrozenTrial]] = {}
    for t in trials:
        if t.state == TrialState.PRUNED and "duplicate_of" in t.user_attrs:
            continue   # a claim that stepped back for an earlier one: never measured
        groups.setdefault(_configuration(t), []).append(t)
    rows = []
    for point in grid_points(axes):
        want = {k: _norm(v) for k, v in point.items()}
        found = next((c for c, ts in groups.items() if not ts[0].user_attrs.get("baseline")
                      and all(_norm(ts[0].params.get(k)) == v for k, v in want.items())), None)
        rows.append(_row(_label(point), groups.pop(found, []), by_pid, max_retry))
    # outside the grid: the axes and whatever else varies between the study's configurations
    varying = {key.rsplit(".", 1)[-1] for key, _ in axes} | {k for k in {k for t in trials for k in t.params}
                                          if len({_norm(t.params.get(k)) for t in trials}) > 1}
    for ts in groups.values():   # the baselines, and anything the grid does not name (a fault: never fine)
        baseline = bool(ts[0].user_attrs.get("baseline"))
        params = {k: v for k, v in ts[0].params.items()
                  if k in (("sampler", "r", "r_inner", "beta") if baseline else varying)}
        row = _row(_label(params) + (" [baseline]" if baseline else " [not in the grid]"), ts, by_pid, max_retry)
        row.in_grid = baseline
        rows.append(row)

    left = [t.number for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    taken = [t for t in trials if t.state == TrialState.FAIL and t.user_attrs.get("fail_kind") == "worker_died"]
    tainted = [t.number for t in taken if t.values is not None or set(MEASURED) & set(t.user_attrs)]
    dropped, problems, lines = _logs(workers)
    state = {t.number: t for t in trials}
    landed_late = [n for n in dropped if n not in state or state[n].state != TrialState.FAIL]
    paused = {f.pid for f in faults if f.kind == "pause" and f.landed}
    from_paused = [t.number for t in taken if "no heartbeat" in t.user_attrs.get("fail_reason", "")
                   and (t.system_attrs.get(CLAIMANT_ATTR) or {}).get("pid") in paused]
    named = [r for r in rows if r.in_grid]
    bad = [r for r in named if not r.ok]
    outside = [f"{r.config} (trials {r.trials})" for r in rows if not r.in_grid]
    missed = [f"{f.kind}: {f.note or 'not landed'}" for f in faults if not f.landed]
    checks = {
        "every configuration COMPLETE exactly once": (
            not bad, f"{len(named) - len(bad)} of {len(named)}" + (f"; not: {[r.config for r in bad]}" if bad else "")),
        "no trial outside the grid": (not outside, "; ".join(outside) or "none"),
        "no trial left RUNNING or WAITING": (not left, f"left: {left}" if left else "none"),
        "no result from a worker whose claim was taken over": (
            not tainted and not landed_late,
            f"{len(taken)} claims taken over ({len(from_paused)} from paused workers), {len(dropped)} late results "
            f"dropped" + (f"; measurement on taken-over trials {tainted}" if tainted else "")
            + (f"; dropped results on trials not failed {landed_late}" if landed_late else "")),
        "no traceback; every error one line": (
            not problems, "; ".join(problems) or ("ok" if workers else "no worker logs here")),
        "every scheduled fault landed": (
            not missed, "; ".join(missed) or (f"{len(faults)} of {len(faults)}" if faults else "none scheduled here")),
    }
    kinds = Counter(t.user_attrs.get("fail_kind") for t in trials if t.state == TrialState.FAIL)
    counts = {"trials": len(trials), "fail_kinds": dict(kinds), "taken_over_from_paused": from_paused,
              "late_results_dropped": dropped, "log_lines": dict(lines),
              "exits": dict(Counter(str(w.rc) for w in workers)), "worker_processes": len(workers)}
    return Verdict(rows, checks, faults, counts)


def table(v: Verdict, scheduled: dict[str, int]) -> str:
    """The verdict as text: one row per configuration, the faults that landed, the checks."""
    width = max([len(r.config) for r in v.rows] + [13])
    vw = max([len(r.verdict) for r in v.rows] + [7])
    out = [f"{'configuration':<{width}}  {'verdict':<{vw}}  {'trials':<12}  recorded by"]
    out += [f"{r.config:<{width}}  {r.verdict:<{vw}}  {','.join(map(str, r.trials)):<12}  {r.recorded_by}"
            for r in v.rows]
    out += ["", f"{'fault':<10} {'scheduled':>9} {'landed':>7}  notes"]
    for kind, n in scheduled.items():
        mine = [f for f in v.faults if f.kind == kind]
        landed = [f for f in mine if f.landed]
        held = sum(bool(f.held) for f in landed)
        notes = {"kill": f"{held} on a worker holding a claim",
                 "pause": f"{held} on a worker holding a claim; {len(v.counts['taken_over_from_paused'])} claims "
                          f"taken over from paused workers; {len(v.counts['late_results_dropped'])} late results "
                          "dropped",
                 "restart": f"{v.counts['log_lines'].get('connection lost', 0)} connection losses met by workers, "
                            f"{v.counts['log_lines'].get('reconnected', 0)} reconnects",
                 "interrupt": f"{v.counts['fail_kinds'].get('interrupted', 0)} trials FAIL interrupted, "
                              "re-queued"}[kind]
        why = sorted({f.note for f in mine if not f.landed and f.note})
        out.append(f"{kind:<10} {n:>9} {len(landed):>7}  {notes}" + (f" (not landed: {'; '.join(why)})" if why else ""))
    out += ["", "checks"]
    out += [f"  {'ok  ' if ok else 'FAIL'}  {name}: {detail}" for name, (ok, detail) in v.checks.items()]
    out.append(f"verdict: {'PASS' if v.passed else 'FAIL'}")
    return "\n".join(out)
