"""``python -m recdiff.tune [Hydra overrides] [tune.<key>=<value> ...]``: search the diffusion sampler's knobs and
LoopSpec's for the fastest setting at no accuracy cost on this device, model and batch size, confirm it on a held-out
slice beside the paper's defaults (and LoopSpec's), and write it as a preset of whichever sampler won (docs/tune.md).

Exit status: 0 (a preset written: the choice, or the paper's defaults kept); 1 (the tune could not finish: no
feasible setting yet, a reference that did not complete, a storage lost); 2 (bad input, one line, before any model
loads; or a ``tune.time_budget_s`` too small for the search's first trial and the confirmation, one line naming the
least that holds them: before anything is measured, the reference's trial estimated by one probed call or as a
resumed tune recorded it, and again once the reference is measured, which the next run keeps); 130 (interrupted:
the running trial is re-queued, and the same command again continues the study).
``RECDIFF_TRACEBACK=1`` shows tracebacks instead of one line.
"""

from __future__ import annotations

import logging
import os
import sys
import time

from recdiff.errors import RecdiffError, SweepStopped, describe_error


def say(line: str) -> None:
    print(line, flush=True)


def tune(argv: list[str], start: float) -> int:
    from recdiff.tune.plan import compose

    tp = compose(argv)                                                      # the plan, every setting checked

    import optuna
    import torch

    from recdiff.params import sampler_text
    from recdiff.presets import settings, write_preset
    from recdiff.study import thread_budget
    from recdiff.tune.budget import Budget
    from recdiff.tune.choice import Measured, Row, choose, feasible, judge, runners_up, settings_text, table
    from recdiff.tune.confirm import confirm
    from recdiff.tune.provenance import provenance, slice_text
    from recdiff.tune.tuning import check_budget, counted, measure_grid, measured, open_tuning, search

    plan, opts = tp.search, tp.options
    budget = Budget(opts.time_budget_s, start=start)
    threads = thread_budget(plan.run.threads, None)
    torch.set_num_threads(threads)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    t = open_tuning(tp, budget, threads)                                    # studies opened, slices prepared
    check_budget(t)          # a budget too small for the search's first trial and the confirmation: before measuring
    reference = sampler_text(plan.run.reference_sampler())
    over = "; ".join(f"{name} {', '.join(tp.searched(name))}" for name in tp.samplers())
    say(f"tune {plan.study.name}: {tp.hardware().label}, model {plan.model.name}, batch {tp.batch}; "
        f"{plan.study.algorithm.value} over {over}; study.n_trials={plan.study.n_trials}, "
        f"tune.time_budget_s={opts.time_budget_s}, tune.patience={opts.patience}")

    ref = Measured.of(measure_grid(tp.reference(), t.reference, t.load, tp.output_dir() / "reference", t.identity))
    assert ref is not None
    floor = ref.accuracy_lo
    say(f"reference {reference} on the searched slice: accuracy {ref.acc()}; a setting is feasible at accuracy "
        f">= {floor:.3f} | {budget.shown()}")
    check_budget(t, ref)     # as measured (the probe is a low estimate); the reference is kept for the next run
    say(f"search ended: {search(t, ref, floor, say)}")

    starts = tp.starts()                      # each sampler's defaults, the paper's first
    paper = starts[0]
    done = counted(t.search)
    trials = [m for m in measured(done) if m is not None]
    chosen = choose(trials, floor, starts)
    own = [next((m for m in trials if m.params == s), None) for s in starts]   # their trials on the searched slice
    if chosen is None and not any(feasible(m, floor) for m in trials):
        raise SweepStopped(f"study {plan.study.name}: no feasible setting among {len(trials)} measured trials: run "
                           "the same command again to continue the search (a larger tune.time_budget_s)")
    is_defaults = chosen is None
    chosen_sampler = tp.defaults() if chosen is None else tp.sampler_of(chosen.params)
    say("chosen: the paper's defaults (no feasible setting was faster)" if chosen is None else
        f"chosen: trial {chosen.number} {chosen.speed()}, {settings_text(chosen.params, starts)}")
    say("confirming on the held-out slice")
    held = confirm(t, chosen_sampler, say)
    verdict = judge(held["chosen"], held["defaults"], held["reference"].accuracy_lo, is_defaults)

    ls_chosen = "loopspec" in held and chosen is not None and chosen.params == starts[1]
    rows = [] if chosen is None or ls_chosen else [
        Row("chosen", "held-out", held["chosen"], settings_text(chosen.params, starts))]
    rows += [Row("paper defaults" + (" = chosen" if is_defaults else ""), "held-out", held["defaults"],
                 settings_text(paper, starts))]
    if "loopspec" in held:
        rows += [Row("loopspec defaults" + (" = chosen" if ls_chosen else ""), "held-out", held["loopspec"],
                     settings_text(starts[1], starts))]
    rows += [Row(f"{reference} = reference", "held-out", held["reference"], "")]
    rows += [Row("runner-up", "searched", m, settings_text(m.params, starts))
             for m in runners_up(trials, floor, [chosen, *own], opts.runners_up)]
    print(f"\n{plan.study.name}: {len(trials)} trials measured, {sum(m.accuracy >= floor for m in trials)} feasible; "
          f"searched {slice_text(t.identity)}, held-out {slice_text(t.holdout_identity)}")
    print(table(rows, reference) + "\n", flush=True)
    say(verdict.reason)

    final = chosen_sampler if verdict.keep else tp.defaults()
    h = held["chosen"] if verdict.keep else held["defaults"]
    result = (f"{h.speed()} vs {reference}, accuracy {h.acc()} (reference {held['reference'].acc()}) on the "
              f"held-out slice; " + ("chosen: " if verdict.keep else "") + verdict.reason)
    complete = sum(tr.state == optuna.trial.TrialState.COMPLETE for tr in done)
    prov = provenance(tp, t.identity, t.holdout_identity, complete, len(done), h, result)
    path = write_preset(tp.preset_path(), settings(final, tp.searched(final.name)), prov, tp.command,
                        overwrite=opts.overwrite, sampler=final.name)
    say(f"preset {tp.preset_name()} ({'the chosen setting' if verdict.keep else 'the paper defaults'}, "
        f"{sampler_text(final)}): {path}; python sweep.py sampler=tuned/{tp.preset_name()} | wall time "
        f"{budget.shown()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    start = time.monotonic()
    argv = list(sys.argv[1:] if argv is None else argv)
    if {"-h", "--help"} & set(argv):
        print(__doc__.strip() + "\n\nThe options (tune.*) and how the choice is made: docs/tune.md")
        return 0
    from recdiff.study import interrupt_on_sigterm

    interrupt_on_sigterm()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    for handler in logging.getLogger().handlers:   # a trial's outcome is on the tune's own line
        handler.addFilter(lambda record: record.funcName != "log_trial")
    try:
        return tune(argv, start)
    except KeyboardInterrupt:
        print("error: interrupted: the running trial is re-queued; the same command again continues the study",
              file=sys.stderr)
        return 130
    except Exception as exc:
        if os.environ.get("RECDIFF_TRACEBACK"):
            raise
        print(f"error: {describe_error(exc)}", file=sys.stderr)
        return 1 if isinstance(exc, SweepStopped) or not _input_error(exc) else 2


def _input_error(exc: BaseException) -> bool:
    """Bad input: a recdiff check, or Hydra's or OmegaConf's (an unknown key, a wrong type, a missing config)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    return isinstance(exc, (RecdiffError, HydraException, OmegaConfBaseException))


if __name__ == "__main__":
    sys.exit(main())
