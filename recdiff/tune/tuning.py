"""One tune under way (:class:`Tuning`): its studies and its search, on the study package's one path (claim →
measure → record, through :mod:`recdiff.study`'s interface): claims with heartbeats, a trial interrupted (Ctrl-C,
SIGTERM) or whose process died (SIGKILL) FAIL and re-queued, so that the same command again continues the study and
loses no trial.

- the reference (``run.reference``, static AR at r=32) on the searched slice, a grid trial of ``<name>-reference``:
  the accuracy a setting must keep;
- the search (``<name>``): the paper's defaults, LoopSpec's, and one-knob moves around the best so far first
  (:mod:`recdiff.tune.design`), then Optuna's proposals (``study.algorithm``): the parameter ``sampler``
  (``diffusion`` or ``loopspec``), then that sampler's knobs (``study.search``, or ``tune.loopspec``), conditional
  parameters as Optuna's define-by-run API asks them (:func:`ask`); each trial's accuracy constraint is Optuna's own
  (``Trial.set_constraint``), set before the trial is told; it stops at ``study.n_trials`` counted trials, after
  ``tune.patience`` trials without a gain, or when the time budget holds no further trial; one line per trial with
  the best so far;
- :func:`measure_grid`: one grid configuration (the reference, a held-out measurement), taken and measured once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from recdiff.errors import RecdiffError, SweepStopped
from recdiff.schema import Config
from recdiff.study import (
    claim_asked,
    config_hash,
    counts,
    fail_stale_trials,
    grid_trial,
    holding,
    make_sampler,
    measure,
    record_outcome,
    skip_duplicate,
)
from recdiff.trial.deadline import TrialTimeout, deadline
from recdiff.trial.outcome import State
from recdiff.tune.budget import MARGIN, Budget, confirmation_s, next_trial_s
from recdiff.tune.choice import Measured, choose, constraint, feasible, setting_of, settings_text, since_gain
from recdiff.tune.design import next_setting
from recdiff.tune.plan import TunePlan

Say = Callable[[str], None]


@dataclass
class Tuning:
    """One tune under way: its plan, studies, identities, workloads and budget."""

    tp: TunePlan
    search: optuna.Study
    reference: optuna.Study
    holdout: optuna.Study
    identity: dict[str, Any]              # the searched slice's (search and reference studies)
    holdout_identity: dict[str, Any]
    load: Callable[[], Any]               # the searched slice's workload
    load_holdout: Callable[[], Any]
    budget: Budget


def open_tuning(tp: TunePlan, budget: Budget, threads: int) -> Tuning:
    """Check the outputs, prepare both slices, open the three studies (each refused when it holds trials measured
    otherwise); nothing loads a model here."""
    from recdiff.study import check_writable_outputs, open_checked_study
    from recdiff.trial import prepare

    out = tp.output_dir()
    check_writable_outputs(tp.search.study, out, out)
    searched = prepare(tp.search.model, tp.search.benchmark)
    held = prepare(tp.search.model, tp.holdout_benchmark())
    search, identity = open_checked_study(tp.search, searched, out / "search")
    # a resumed search draws anew rather than repeating its first proposals (each run seeds by what the study holds)
    search.sampler = make_sampler(tp.search.study, worker=len(search.get_trials(deepcopy=False)))
    reference, _ = open_checked_study(tp.reference(), searched, out / "reference")
    holdout, holdout_identity = open_checked_study(tp.holdout(tp.defaults()), held, out / "holdout")
    return Tuning(tp, search, reference, holdout, identity, holdout_identity, lambda: searched.load(threads),
                  lambda: held.load(threads), budget)


def measure_grid(plan: Config, study: optuna.Study, load: Callable[[], Any], out_dir: Path,
                 identity: dict[str, Any]) -> FrozenTrial:
    """The plan's configuration in its grid study: COMPLETE already, copied from another study of the storage under
    the same identity, or measured now. One that cannot complete stops the tune in one line (exit 1)."""
    attrs = {"config_hash": config_hash(plan), "identity": identity}
    trial = grid_trial(plan, study, load, out_dir, attrs)
    if trial is None:
        raise SweepStopped(f"study {study.study_name}: the worker of {plan.sampler.name} died more than "
                           f"study.max_retry={plan.study.max_retry} times")
    if trial.state != TrialState.COMPLETE or Measured.of(trial) is None:
        why = trial.user_attrs.get("fail_reason") or trial.user_attrs.get("prune_reason") or trial.state.name
        raise SweepStopped(f"study {study.study_name}: trial {trial.number} ({plan.sampler.name}) did not complete "
                           f"({why}): the tune stopped")
    return trial


def queue_next(t: Tuning, floor: float) -> None:
    """Queue the design's next setting (:func:`recdiff.tune.design.next_setting`) when no trial waits: a re-queued
    trial (interrupted, its worker dead) runs before anything new."""
    if t.search.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        return
    seen = [setting_of(tr.params) for tr in t.search.get_trials(deepcopy=False)]
    done = [m for m in measured(counted(t.search)) if m is not None]
    params = next_setting(t.tp, done, floor, seen)
    if params is not None:   # the parameter sampler is asked only where there is a choice (ask)
        t.search.enqueue_trial(params if len(t.tp.samplers()) > 1 else
                               {k: v for k, v in params.items() if k != "sampler"})


def suggest(trial: optuna.Trial, name: str, dist: Any) -> Any:
    """``trial``'s value of parameter ``name`` under distribution ``dist`` (Optuna's suggest API; an enqueued
    trial's value where it has one)."""
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        return trial.suggest_categorical(name, dist.choices)
    if isinstance(dist, optuna.distributions.IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
    return trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)


def ask(t: Tuning) -> optuna.Trial:
    """A new trial of the search (or the next enqueued one): its sampler (the parameter ``sampler``, where LoopSpec
    is searched too), then that sampler's knobs, conditional on it."""
    trial, space = t.search.ask(), t.tp.space()
    sampler = suggest(trial, "sampler", optuna.distributions.CategoricalDistribution(list(space))) \
        if len(space) > 1 else "diffusion"
    for key, dist in space[sampler].items():
        suggest(trial, key, dist)
    return trial


def counted(study: optuna.Study) -> list[FrozenTrial]:
    """The search's counted trials (:func:`recdiff.study.counts`), in order."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED))
    return sorted((t for t in done if counts(t)), key=lambda t: t.number)


def measured(trials: list[FrozenTrial]) -> list[Measured | None]:
    """The trials that ran (an invalid combination, PRUNED at once, did not), measured or None (FAIL): the patience
    counts these."""
    return [Measured.of(t) for t in trials if t.state != TrialState.PRUNED]


def holdout_factor(tp: TunePlan) -> float:
    """The held-out slice's measurement over a searched trial's: more problems, or more timed calls and rounds, take
    longer."""
    held, run = tp.holdout_benchmark(), tp.search.run
    timed = (tp.holdout_speed_samples * tp.holdout_repeats) / (run.speed_samples * run.repeats)
    return max(held["limit"] / tp.search.benchmark["limit"], timed)


def reserve_s(t: Tuning, history: list[Measured | None], reference: Measured, floor: float) -> float:
    """Seconds to keep for the confirmation (see :func:`recdiff.tune.budget.confirmation_s`)."""
    starts = t.tp.starts()
    done = [m for m in history if m is not None]
    own = [next((m.seconds for m in done if m.params == s), None) for s in starts]   # each sampler's defaults
    best = choose(done, floor, starts)
    return confirmation_s(reference.seconds or 0.0, [*own, best.seconds if best else None], holdout_factor(t.tp))


def least_budget_s(t: Tuning, reference_s: float, measured: bool) -> float:
    """The least ``tune.time_budget_s`` in which the search starts a trial, reckoned as the search reckons it
    (:func:`search`): the time used so far, the reference's trial if it is still to be measured, then the search's
    first trial (:func:`~recdiff.tune.budget.next_trial_s`) and the confirmation kept after it
    (:func:`~recdiff.tune.budget.confirmation_s`: the reference, each sampler's defaults and the choice, none measured
    yet, so each as long as the reference's trial)."""
    others = [None] * (len(t.tp.starts()) + 1)
    need = next_trial_s([], reference_s) + confirmation_s(reference_s, others, holdout_factor(t.tp))
    return t.budget.elapsed() + (0.0 if measured else reference_s) + need


def probe_reference_s(t: Tuning) -> float:
    """A low estimate of the reference's trial, made before it is measured: one call of the reference on the searched
    slice's first problem alone (after an untimed one), times the calls of its trial that each take at least as long:
    its timed calls (``run.speed_samples`` × ``run.repeats``) and the batches of its accuracy pass."""
    import recdiff
    from recdiff.samplers import default_batch_size
    from recdiff.timing import Timer, torch_threads
    from recdiff.trial.measure import encode_prompts, shared_settings

    run, work = t.tp.reference().run, t.load()
    base, codec = shared_settings(work, run)
    ref = run.reference_sampler()
    prompts = encode_prompts(work, run.max_new_tokens, codec)
    one = {**base, "sampler": ref.name, **ref.params(), "max_new_tokens": prompts.limits[0]}
    with torch_threads(run.timing_threads):
        recdiff.generate(work.model, prompts.ids[0], **one)   # allocations, kernel selection
        with Timer(work.device) as timer:
            recdiff.generate(work.model, prompts.ids[0], **one)
    batches = math.ceil(len(prompts.ids) / (run.batch_size or default_batch_size(work.device)))
    timed = (min(run.speed_samples, len(prompts.ids)) if run.timing_batch == 1 else run.speed_samples) * run.repeats
    return timer.seconds * (timed + batches)


def check_budget(t: Tuning, reference: Measured | None = None) -> None:
    """Refuse (one line, :class:`RecdiffError`) a ``tune.time_budget_s`` that cannot hold the search's first trial
    and the confirmation (:func:`least_budget_s`), naming the least that can. Before the reference is measured
    (``reference`` None) its trial's length is the one a resumed tune recorded, else :func:`probe_reference_s`'s
    estimate: a low one, so that a budget refused here is too small; after, the measured one. Not once the search holds
    trials: it reckons with their durations itself (:func:`search`)."""
    if t.budget.seconds is None or counted(t.search):   # a resumed search reckons with the trials it measured
        return
    if reference is None:
        digest = config_hash(t.tp.reference())
        done = [tr for tr in t.reference.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if tr.user_attrs.get("config_hash") == digest and tr.duration is not None]
        measured = bool(done)
        seconds = done[-1].duration.total_seconds() if done else probe_reference_s(t)
    else:
        measured, seconds = True, reference.seconds or 0.0
    least = least_budget_s(t, seconds, measured)
    if t.budget.seconds < least:
        what = ("" if measured else "the reference's trial, ") + "the search's first trial and the confirmation"
        took = f"took {seconds:.0f} s" if measured else f"probed at >= {seconds:.0f} s"
        least = math.ceil(least)
        raise RecdiffError(f"tune.time_budget_s={t.budget.seconds:g} cannot hold {what}: they need {least} s here "
                           f"(the reference's trial {took}; the confirmation {len(t.tp.starts()) + 2} such trials "
                           f"x {holdout_factor(t.tp):.3g} for the held-out slice x {MARGIN} margin): give "
                           f"tune.time_budget_s={least} or more")


def search(t: Tuning, reference: Measured, floor: float, say: Say) -> str:
    """Ask, claim, measure and record trials until a budget ends the search; why it ended."""
    plan, opts, study = t.tp.search, t.tp.options, t.search
    in_a_row = 0
    while True:
        fail_stale_trials(study)
        done, history = len(counted(study)), measured(counted(study))
        if done >= plan.study.n_trials:
            return f"the study holds {done} trials (study.n_trials={plan.study.n_trials})"
        if opts.patience and since_gain(history, floor) >= opts.patience:
            return f"no gain in the last {opts.patience} trials (tune.patience={opts.patience})"
        reserve = reserve_s(t, history, reference, floor)
        durations = [m.seconds for m in history if m is not None and m.seconds]
        if not t.budget.fits(reserve + next_trial_s(durations, reference.seconds or 0.0)):
            return (f"the time budget holds no further trial and the confirmation ({t.budget.shown()} used, "
                    f"{reserve:.0f} s kept for the confirmation)")
        queue_next(t, floor)
        trial = ask(t)
        claim_asked(study, trial)
        trial_plan = t.tp.trial_plan(setting_of(trial.params))
        attrs = {"config_hash": config_hash(trial_plan), "identity": t.identity}
        for k, v in attrs.items():   # seen by other workers' duplicate checks from now on
            trial.set_user_attr(k, v)
        dup = skip_duplicate(study, trial, attrs["config_hash"]) if plan.study.skip_duplicates else None
        if dup is not None:
            in_a_row += 1
            if in_a_row >= plan.study.max_duplicates:
                return f"{in_a_row} duplicate proposals in a row: the search space looks exhausted"
            continue
        in_a_row = 0
        out = t.tp.output_dir() / "search" / "trials" / f"{trial.number:04d}"
        # a setting slower than a few reference trials cannot be the fastest; the confirmation keeps its time
        limit = min(t.budget.left() - reserve, opts.trial_timeout_x * (reference.seconds or math.inf))
        try:
            with deadline(None if math.isinf(limit) else limit), holding(study, trial, plan.study.heartbeat_interval):
                outcome = measure(trial_plan, study, t.load, out, attrs, reuse=False)
        except TrialTimeout:   # the limit fell outside the measurement: the trial is FAIL (interrupted), re-queued
            return f"trial {trial.number} reached its time limit ({limit:.0f} s) outside its measurement: re-queued"
        if outcome.state == State.COMPLETE:
            try:
                trial.set_constraint("accuracy", constraint(outcome.values[0], floor))
            except optuna.exceptions.UpdateFinishedTrialError:   # failed meanwhile by another worker: not ours
                pass
        finished = record_outcome(trial_plan, study, trial, outcome, out, attrs)
        say(progress(finished, counted(study), floor, t.tp.starts(), t))


def progress(trial: FrozenTrial, done: list[FrozenTrial], floor: float, starts: list[dict[str, Any]],
             t: Tuning) -> str:
    """One line: the trial's outcome, the best so far, the budgets."""
    history = measured(done)
    m = Measured.of(trial)
    if m is None:
        why = trial.user_attrs.get("fail_reason") or trial.user_attrs.get("prune_reason") or ""
        head = f"trial {trial.number:3d} {trial.state.name:8s} {why}"
    else:
        ok = "feasible" if feasible(m, floor) else "below the reference's accuracy"
        head = (f"trial {trial.number:3d} speed-up {m.speed()} accuracy {m.acc()} {ok}; "
                f"{settings_text(m.params, starts)}")
    ran = [h for h in history if h is not None]
    best = choose(ran, floor, starts) or next((h for h in ran if h.params == starts[0] and feasible(h, floor)), None)
    shown = f"best: trial {best.number} {best.speed()}" if best else "best: none feasible yet"
    opts, n = t.tp.options, t.tp.search.study.n_trials
    gain = f", {since_gain(history, floor)} of {opts.patience} without a gain" if opts.patience else ""
    return f"{head} | {shown} | {len(done)}/{n} trials, {t.budget.shown()}{gain}"
