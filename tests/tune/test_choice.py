"""The choice on hand-made trials: feasibility against the reference's interval, the knee with ties broken towards the
paper's defaults, runners-up, the patience's clock, the verdict on the held-out slice and the closing table; across
the two samplers (a LoopSpec setting judged by the same numbers as a diffusion one)."""

from __future__ import annotations

import datetime

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState

from recdiff.tune.choice import (
    Measured,
    Row,
    changed,
    choose,
    constraint,
    feasible,
    judge,
    knee,
    runners_up,
    setting_of,
    settings_text,
    since_gain,
    table,
)

SPACE = {"r_inner": IntDistribution(1, 32, log=True)}
PAPER = {"sampler": "diffusion", "r_inner": 4, "epsilon": 0.03, "eta": 0.1, "beta_schedule": "linear"}
LOOPSPEC = {"sampler": "loopspec", "r_draft": 4, "r_draft2": None}
DEFAULTS = [PAPER, LOOPSPEC]   # each sampler's defaults, the paper's first (TunePlan.starts)
FLOOR = 0.926   # the reference's (static r=32, 48/48) Wilson lower bound


def m(number: int, speedup: float, half: float = 0.1, accuracy: float = 1.0, **params) -> Measured:
    return Measured(number, {**PAPER, **params}, speedup, speedup - half, speedup + half, accuracy,
                    max(0.0, accuracy - 0.07), 1.0)


def ls(number: int, speedup: float, half: float = 0.1, accuracy: float = 1.0, **params) -> Measured:
    """A LoopSpec trial: its sampler and knobs (r_draft, r_draft2), LoopSpec's defaults where not given."""
    return Measured(number, {**LOOPSPEC, **params}, speedup, speedup - half, speedup + half, accuracy,
                    max(0.0, accuracy - 0.07), 1.0)


def test_feasible_means_accuracy_at_or_above_the_reference_lower_bound():
    assert feasible(m(0, 3.0, accuracy=FLOOR), FLOOR) and constraint(FLOOR, FLOOR) == 0
    assert not feasible(m(0, 3.0, accuracy=0.9), FLOOR)
    assert constraint(0.9, FLOOR) == pytest.approx(0.026)   # Optuna's value: > 0 is infeasible
    assert constraint(1.0, FLOOR) < 0


def test_the_knee_is_the_fastest_feasible_setting():
    trials = [m(0, 3.0), m(1, 4.2, r_inner=1), m(2, 3.6, r_inner=2), m(3, 9.0, accuracy=0.5, r_inner=1)]
    assert knee(trials, FLOOR, DEFAULTS).number == 1          # trial 3 is faster, but infeasible
    assert knee([m(3, 9.0, accuracy=0.5)], FLOOR, DEFAULTS) is None
    assert knee([], FLOOR, DEFAULTS) is None


def test_a_tie_goes_to_the_paper_defaults():
    # the defaults' 4.05 lies within the fastest's interval [4.0, 4.2]: tied, and the defaults themselves win
    assert knee([m(0, 4.05), m(1, 4.1, r_inner=1)], FLOOR, DEFAULTS).number == 0
    # apart: the faster one wins although it changes a knob
    assert knee([m(0, 3.0), m(1, 4.1, r_inner=1)], FLOOR, DEFAULTS).number == 1
    # a noisy trial's wide interval [2.7, 4.8] overlaps the fastest's, but its 3.76 lies outside [4.48, 5.3]: no tie
    assert knee([m(0, 3.76, half=1.05), m(1, 4.95, half=0.41, r_inner=1, eta=0.2)], FLOOR, DEFAULTS).number == 1


def test_among_ties_fewer_knobs_changed_then_the_fastest_win():
    one_knob = m(1, 4.0, r_inner=2)
    two_knobs = m(2, 4.1, r_inner=1, eta=0.2)
    faster_one_knob = m(3, 4.05, eta=0.0)
    assert knee([one_knob, two_knobs], FLOOR, DEFAULTS).number == 1
    assert knee([one_knob, two_knobs, faster_one_knob], FLOOR, DEFAULTS).number == 3
    assert knee([m(4, 5.0, r_inner=1, eta=0.2), one_knob], FLOOR, DEFAULTS).number == 4    # apart: the fastest
    assert (changed({**PAPER, "r_inner": 2}, DEFAULTS), changed(PAPER, DEFAULTS)) == (1, 0)
    assert changed({**PAPER, "beta_schedule": "constant", "eta": 0.0}, DEFAULTS) == 2


def test_an_infeasible_trial_never_ties_and_runners_up_are_feasible_and_fastest_first():
    trials = [m(0, 3.0), m(1, 4.1, r_inner=1), m(2, 4.15, accuracy=0.8, r_inner=1, eta=0.5), m(3, 3.5, r_inner=2),
              m(4, 2.0, r_inner=8)]
    chosen = knee(trials, FLOOR, DEFAULTS)
    assert chosen.number == 1
    assert [r.number for r in runners_up(trials, FLOOR, [chosen], 2)] == [3, 0]
    assert [r.number for r in runners_up(trials, FLOOR, [chosen, trials[0]], 10)] == [3, 4]


def test_the_choice_is_the_knee_of_the_other_settings_when_it_is_faster_than_the_defaults():
    # the defaults' 4.25 lies within the fastest's interval [4.2, 4.4]: the knee of all is the defaults ...
    trials = [m(0, 4.25), m(1, 4.3, r_inner=2), m(2, 4.2, r_inner=1, eta=0.5), m(3, 3.4, eta=0.0)]
    assert knee(trials, FLOOR, DEFAULTS).number == 0
    # ... but the setting to confirm beside them on the held-out slice is the knee of the others: there, with the
    # defaults measured again beside it, the last tie goes to the defaults
    assert choose(trials, FLOOR, DEFAULTS).number == 1
    # nothing faster than the defaults' own trial: nothing to confirm
    assert choose([m(0, 3.5), m(1, 3.4, r_inner=2)], FLOOR, DEFAULTS) is None
    # the defaults below the bar (or not measured): the others' knee
    assert choose([m(0, 3.5, accuracy=0.8), m(1, 3.4, r_inner=2)], FLOOR, DEFAULTS).number == 1
    assert choose([m(1, 3.4, r_inner=2)], FLOOR, DEFAULTS).number == 1
    assert choose([m(0, 3.5)], FLOOR, DEFAULTS) is None


def test_patience_counts_trials_since_a_gain_beyond_its_interval():
    history = [m(0, 3.0), None, m(2, 3.05), m(3, 3.5), m(4, 9.0, accuracy=0.5), m(5, 3.55)]
    # trial 2's interval [2.95, 3.15] reaches below trial 0's 3.0 (no gain); trial 3's [3.4, 3.6] lies above it; then
    # an infeasible one, and trial 5 whose interval reaches below 3.5
    assert since_gain(history, FLOOR) == 2
    assert since_gain([], FLOOR) == 0
    assert since_gain([None, None], FLOOR) == 2
    assert since_gain([m(0, 3.0, accuracy=0.5)], FLOOR) == 1


def test_the_verdict_keeps_the_defaults_unless_the_choice_beats_them_beyond_the_intervals():
    defaults = m(10, 3.3)
    assert judge(m(11, 4.2), defaults, FLOOR, is_defaults=False).keep
    overlapping = judge(m(11, 3.45), defaults, FLOOR, is_defaults=False)
    assert not overlapping.keep and "nothing beats the paper's defaults beyond the intervals" in overlapping.reason
    worse = judge(m(11, 4.2, accuracy=0.9), defaults, FLOOR, is_defaults=False)
    assert not worse.keep and "below the reference's interval" in worse.reason
    assert not judge(defaults, defaults, FLOOR, is_defaults=True).keep


def test_measured_reads_a_complete_trial_and_nothing_else():
    start = datetime.datetime(2026, 1, 1)
    attrs = {"speedup": 4.0, "speedup_lo": 3.9, "speedup_hi": 4.1, "accuracy_lo": 0.93, "accuracy_hi": 1.0}
    done = optuna.trial.create_trial(state=TrialState.COMPLETE, values=[1.0, 80.0], params={"r_inner": 1},
                                     distributions={"r_inner": SPACE["r_inner"]}, user_attrs=attrs)
    done.datetime_start, done.datetime_complete = start, start + datetime.timedelta(seconds=12)
    got = Measured.of(done)
    # a trial without the parameter sampler (recorded before the tune searched LoopSpec) is a diffusion setting
    assert (got.speedup, got.speedup_lo, got.accuracy, got.accuracy_lo, got.params, got.seconds) == \
        (4.0, 3.9, 1.0, 0.93, {"sampler": "diffusion", "r_inner": 1}, 12.0)
    # a trial of a tune resumed on a journal written before recdiff/trial/record.py: accuracy_low/high
    older = optuna.trial.create_trial(state=TrialState.COMPLETE, values=[1.0, 80.0], params={"r_inner": 1},
                                      distributions={"r_inner": SPACE["r_inner"]},
                                      user_attrs={"speedup": 4.0, "speedup_lo": 3.9, "speedup_hi": 4.1,
                                                  "accuracy_low": 0.93, "accuracy_high": 1.0})
    assert (Measured.of(older).accuracy_lo, Measured.of(older).accuracy_hi) == (0.93, 1.0)
    looped = optuna.trial.create_trial(
        state=TrialState.COMPLETE, values=[1.0, 90.0], params={"sampler": "loopspec", "r_draft": 4, "r_draft2": None},
        distributions={"sampler": CategoricalDistribution(["diffusion", "loopspec"]),
                       "r_draft": CategoricalDistribution([1, 2, 4, 8, 16]),
                       "r_draft2": CategoricalDistribution([None, 2, 4, 8, 16])}, user_attrs=attrs)
    assert Measured.of(looped).params == LOOPSPEC
    assert setting_of({"benchmark": "compose", "r_inner": 2}) == {"sampler": "diffusion", "r_inner": 2}
    failed = optuna.trial.create_trial(state=TrialState.FAIL, params={}, distributions={})
    unpaired = optuna.trial.create_trial(state=TrialState.COMPLETE, values=[1.0, 80.0],
                                         user_attrs={"accuracy_lo": 0.9, "accuracy_hi": 1.0})
    assert Measured.of(failed) is None and Measured.of(unpaired) is None


def test_the_table_shows_each_number_with_its_interval():
    text = table([Row("chosen", "held-out", m(3, 4.21, half=0.08), "r_inner=1"),
                  Row("static r=32 = reference", "held-out", m(0, 1.0, half=0.03), "")], "static r=32")
    head, chosen, ref = text.splitlines()
    assert "speed-up vs static r=32 [95% CI]" in head and "accuracy [95% CI]" in head
    assert "4.21x [4.13, 4.29]" in chosen and "1.000 [0.930, 1.000]" in chosen and chosen.endswith("r_inner=1")
    assert "1.00x [0.97, 1.03]" in ref


def test_the_climb_moves_its_center_only_beyond_both_intervals():
    from recdiff.tune.design import center

    noisy = m(0, 3.3, half=1.0)                                       # the defaults under a passing load
    lucky = m(1, 3.74, half=0.3, wavefront=256)                       # a knob that changes nothing, timed well
    real = m(2, 4.6, half=0.2, r_inner=2)
    assert center([noisy, lucky], FLOOR, PAPER) == PAPER              # [3.44, 4.04] reaches into [2.3, 4.3]
    assert center([noisy, lucky, real], FLOOR, PAPER) == real.params  # [4.4, 4.8] lies above it
    assert center([m(0, 3.3), m(3, 9.0, accuracy=0.5, r_inner=1)], FLOOR, PAPER) == PAPER   # infeasible
    assert center([lucky], FLOOR, PAPER) == PAPER                     # the defaults first


def test_the_faster_feasible_sampler_wins_by_the_same_interval_rule():
    # LoopSpec at its defaults, 5.0x [4.9, 5.1], beyond the best diffusion setting's 4.1x: it is the choice
    trials = [m(0, 3.0), m(1, 4.1, r_inner=1), ls(2, 5.0), ls(3, 3.2, r_draft=8)]
    assert choose(trials, FLOOR, DEFAULTS).number == 2
    # the other way round: the diffusion setting is faster beyond LoopSpec's interval
    assert choose([m(0, 3.0), m(1, 5.0, r_inner=1), ls(2, 4.1)], FLOOR, DEFAULTS).number == 1
    # faster but below the reference's accuracy (LoopSpec sampled, say): never chosen, never tied
    assert choose([m(0, 3.0), m(1, 4.1, r_inner=1), ls(2, 9.0, accuracy=0.8)], FLOOR, DEFAULTS).number == 1
    # nothing of either sampler faster than the paper's defaults: nothing to confirm
    assert choose([m(0, 5.0), ls(1, 4.0), m(2, 4.5, r_inner=2)], FLOOR, DEFAULTS) is None


def test_the_sampler_counts_as_a_knob_changed_in_a_tie():
    assert (changed(LOOPSPEC, DEFAULTS), changed({**LOOPSPEC, "r_draft": 8}, DEFAULTS)) == (1, 2)
    assert changed({**LOOPSPEC, "r_draft": 2, "r_draft2": 8}, DEFAULTS) == 3
    # LoopSpec's 4.15x [4.05, 4.25] and r_inner=1's 4.1x are tied; one knob changed each: the faster wins
    assert knee([m(0, 3.0), m(1, 4.1, r_inner=1), ls(2, 4.15)], FLOOR, DEFAULTS).number == 2
    # LoopSpec with its draft depth moved changes two: the one-knob diffusion setting wins the tie
    assert knee([m(0, 3.0), m(1, 4.1, r_inner=1), ls(2, 4.15, r_draft=8)], FLOOR, DEFAULTS).number == 1
    # the paper's defaults themselves, tied with LoopSpec, win it (no knob changed)
    assert knee([m(0, 4.1), ls(1, 4.15)], FLOOR, DEFAULTS).number == 0


def test_a_loopspec_choice_is_judged_against_the_paper_defaults_and_named_by_its_knobs():
    defaults = m(10, 3.3)
    assert judge(ls(11, 5.0), defaults, FLOOR, is_defaults=False).keep
    assert not judge(ls(11, 3.35), defaults, FLOOR, is_defaults=False).keep           # intervals overlap
    assert settings_text(LOOPSPEC, DEFAULTS) == "sampler=loopspec"
    assert settings_text({**LOOPSPEC, "r_draft": 8, "r_draft2": 16}, DEFAULTS) == \
        "sampler=loopspec r_draft=8 r_draft2=16"
    assert settings_text({**LOOPSPEC, "r_draft": 2, "r_draft2": None}, DEFAULTS) == "sampler=loopspec r_draft=2"
    assert settings_text({**PAPER, "r_inner": 1}, DEFAULTS) == "r_inner=1"
    assert settings_text(PAPER, DEFAULTS) == "(the paper's defaults)"
    # runners-up mix the samplers, fastest first
    trials = [m(0, 3.0), ls(1, 5.0), m(2, 4.1, r_inner=1), ls(3, 4.5, r_draft=8)]
    assert [r.number for r in runners_up(trials, FLOOR, [trials[1], trials[0]], 3)] == [3, 2]
