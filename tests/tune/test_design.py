"""The search's first proposals (``recdiff/tune/design.py``): the paper's defaults, LoopSpec at its defaults and its
draft depth one step either way, then one-knob moves around the best setting so far, whichever sampler it is; every
proposal valid for its sampler."""

from __future__ import annotations

import pytest

import recdiff.device
from recdiff.params import LoopSpecParams
from recdiff.tune.choice import Measured
from recdiff.tune.design import first, neighbours, next_setting, steps
from recdiff.tune.plan import compose

FLOOR = 0.93


@pytest.fixture(autouse=True)
def acme(monkeypatch):
    monkeypatch.setattr(recdiff.device, "cpu_name", lambda: "Acme(R) Rocket(TM) 9000 CPU @ 3.00GHz")


@pytest.fixture(scope="module")
def tp():
    return compose(["run.batch_size=1"])


def loopspec(setting: dict) -> LoopSpecParams:
    return LoopSpecParams(r=32, **{k: v for k, v in setting.items() if k != "sampler"})


def timed(number: int, setting: dict, speedup: float) -> Measured:
    return Measured(number, setting, speedup, speedup - 0.1, speedup + 0.1, 1.0, 0.93, 1.0)


def test_loopspec_is_proposed_right_after_the_paper_defaults_and_every_proposal_is_valid(tp):
    head = first(tp)
    start = {"sampler": "loopspec", "r_draft": 4, "r_draft2": None}
    assert head[:2] == [tp.paper(), start]
    # its draft depth one step either way among r = 32's divisors
    assert sorted(s["r_draft"] for s in head[2:]) == [2, 8] and all(s["r_draft2"] is None for s in head[2:])
    for setting in head[1:]:
        assert setting["sampler"] == "loopspec" and loopspec(setting).complaint() is None
        assert tp.sampler_of(setting) == loopspec(setting)


def test_moves_around_a_loopspec_center_keep_its_rule(tp):
    center = {"sampler": "loopspec", "r_draft": 8, "r_draft2": 16}
    moves = steps(tp, center)
    # r_draft = 16 would not lie below r_draft2 = 16, and r_draft2 = 8 not above r_draft = 8: the next valid values
    assert sorted(moves, key=str) == sorted([{**center, "r_draft": 4}, {**center, "r_draft2": None}], key=str)
    assert all(loopspec(m).complaint() is None for m in moves)
    # from one early readout, to the second readout's first valid depth (2 and 4 do not lie above r_draft = 4)
    around = steps(tp, {"sampler": "loopspec", "r_draft": 4, "r_draft2": None})
    assert {"sampler": "loopspec", "r_draft": 4, "r_draft2": 8} in around
    assert all(m["r_draft2"] in (None, 8) and loopspec(m).complaint() is None for m in around)
    assert steps(tp, center) == moves                        # seeded with study.seed


def test_the_climb_follows_the_best_setting_whichever_sampler_it_is(tp):
    head = first(tp)
    paper, start = head[0], head[1]
    # the first settings in order, each once
    assert [next_setting(tp, [], FLOOR, head[:i]) for i in range(len(head))] == head
    # LoopSpec's defaults beat the paper's beyond both intervals: the moves go on around them
    done = [timed(0, paper, 1.6), timed(1, start, 3.0)]
    nxt = next_setting(tp, done, FLOOR, head)
    assert nxt in steps(tp, start) and nxt["sampler"] == "loopspec"
    # the paper's defaults stay ahead: the diffusion sampler's knobs move
    done = [timed(0, paper, 3.0), timed(1, start, 1.2)]
    nxt = next_setting(tp, done, FLOOR, head)
    assert nxt in steps(tp, paper) and nxt["sampler"] == "diffusion"


def test_neighbours_on_a_ladder():
    assert neighbours([None, 2, 4, 8], None) == [2]
    assert neighbours([None, 2, 4, 8], 4) == [2, 8]
    assert neighbours([1, 2, 4, 8], 3) == [2, 4]
    assert neighbours([1, 2, 4, 8], 8) == [4]
