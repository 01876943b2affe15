"""The diffusion sampler on a closed-form model (tests/closed_form.py), against expectations computed here from
the paper's formulas: what the reference fixtures do not cover (β schedules other than dampened, α > 0 on new
states, momentum on new states, continuous compute, headway > 1, stop strings) and the two freeze rules.

In the closed-form model positions do not interact and a state is one number, so a state's value after its steps
is a short loop over the paper's equations (:func:`state_after`), and its token reveals it (``round(q·s)``).
"""

from __future__ import annotations

import math

import pytest

from recdiff import generate
from tests.closed_form import ClosedForm, token

PROMPT = [1, 2, 3]
L = len(PROMPT)


def beta_t(schedule: str, beta: float, n: int, r: int) -> float:
    """β_t of a position that has had n recurrences (docs/architecture.md, ``beta_schedule``)."""
    return {"constant": beta, "linear": beta * max(0.0, 1 - n / r), "sqrt": beta / math.sqrt(1 + n),
            "dampened": beta / (1 + n)}[schedule]


def state_after(steps: int, s: float, e: float, *, a: float, r: int, r_inner: int, beta: float = 0.0,
                schedule: str = "constant", alpha: float = 0.0, eta: float = 0.0) -> float:
    """A state's value after ``steps`` sampler steps from ``s`` with momentum buffer ``e``: each step mixes in
    noise, z ← (1 − β_t)·z + β_t·InitState(α) (= α here), sets e ← η·e + (1 − η)·P(y) (P(y) = 1), and runs r'
    recurrences z ← a·z + e."""
    for m in range(steps):
        b = beta_t(schedule, beta, m * r_inner, r)
        s = (1 - b) * s + b * alpha
        e = eta * e + (1 - eta) * 1.0
        for _ in range(r_inner):
            s = a * s + e
    return s


def fixed_run(n_new: int, *, a: float, r: int, r_inner: int, headway: int = 1, continuous: bool = False,
              alpha: float = 0.0, **kw) -> list[float]:
    """The final states behind ``n_new`` tokens under fixed freezing with a wavefront that never fills: the prefill's
    state (the prompt's last, r recurrences from InitState(α) with e = 1), then the state at L + j for j = 0, 1, …,
    each refined for ⌈r/r'⌉ steps. States enter in groups: the state at L at admission, then ``headway`` states
    after each step. A new state starts from InitState(α), or under continuous compute from the state ``headway``
    rows to its left after that state's first step, where the wavefront already holds ``headway`` states (every
    group after the first; the first state's group of one cannot feed a headway above one)."""
    steps = -(-r // r_inner)
    prefill = alpha * a**r + sum(a**k for k in range(r))
    one = dict(a=a, r=r, r_inner=r_inner, alpha=alpha, **kw)
    inits, groups = [alpha], [[0]]  # the state at L starts from InitState(α) with the prefill's embedding as e_prev
    while len(inits) < n_new:
        g = len(groups)
        members = list(range(len(inits), len(inits) + headway))
        prev = groups[-1]
        for i, j in enumerate(members):
            if continuous and len(prev) == headway:
                src = prev[i]
                inits.append(state_after(1, inits[src], 1.0 if src == 0 else 0.0, **one))
            else:
                inits.append(alpha)
        groups.append(members)
        assert g < 100
    finals = [state_after(steps, s, 1.0 if j == 0 else 0.0, **one) for j, s in enumerate(inits)]
    return [prefill] + finals[: n_new - 1]


# ------------------------------------------------------------------------------------------------ fixed freezing
CASES = {
    # β schedules: with α = 0 the noise shrinks the state, z ← (1 − β_t)·z, by β_t of the recurrences so far
    "beta constant": dict(beta=0.5, schedule="constant", q=128.0),
    "beta linear": dict(beta=0.5, schedule="linear", q=128.0),
    "beta sqrt": dict(beta=0.5, schedule="sqrt", q=128.0),
    "beta dampened": dict(beta=0.5, schedule="dampened", q=128.0),
    "no noise": dict(q=128.0),
    # α > 0: new states and the noise are InitState(α)
    "alpha, no noise": dict(alpha=16.0, q=8.0),
    "alpha, beta constant": dict(alpha=16.0, beta=0.5, schedule="constant", q=8.0),
    "alpha, beta linear": dict(alpha=16.0, beta=0.5, schedule="linear", q=8.0),
    # momentum: a new position's buffer is zero, the first state's is the prefill's P(y) = 1
    "momentum": dict(eta=0.5, q=30.0),
    # continuous compute: a new state starts from its left neighbour's, not from InitState(α)
    "continuous": dict(continuous=True, q=100.0),
    "continuous, alpha": dict(continuous=True, alpha=16.0, q=8.0),
    "continuous, headway 2": dict(continuous=True, headway=2, q=100.0),
    "continuous, headway 2, alpha": dict(continuous=True, headway=2, alpha=16.0, q=8.0),
    "headway 3": dict(headway=3, alpha=4.0, beta=0.25, schedule="sqrt", q=20.0),
}


@pytest.mark.parametrize("case", list(CASES))
def test_fixed_freeze_states_follow_the_papers_equations(case):
    kw = dict(CASES[case])
    q, r, r_inner, n = kw.pop("q", 32.0), 6, 2, 10
    model = ClosedForm(a=0.5, q=q)
    want = [token(q, s) for s in fixed_run(n, a=0.5, r=r, r_inner=r_inner, **kw)]
    res = generate(model, PROMPT, "diffusion", max_new_tokens=n, r=r, r_inner=r_inner, freeze="fixed",
                   eta=kw.get("eta", 0.0), beta=kw.get("beta", 0.0), beta_schedule=kw.get("schedule", "linear"),
                   init_scale=kw.get("alpha", 0.0), continuous_compute=kw.get("continuous", False),
                   headway=kw.get("headway", 1), pad_id=0, stop_token_ids=[])
    assert res.tokens == want


def test_the_cases_tell_the_features_apart():
    """Each feature changes the tokens: a sampler that ignored it (or used another schedule) would fail above."""
    seen = {}
    for case, kw in CASES.items():
        kw = dict(kw)
        q = kw.pop("q", 32.0)
        seen[case] = [token(q, s) for s in fixed_run(10, a=0.5, r=6, r_inner=2, **kw)]
    schedules = [seen[f"beta {s}"] for s in ("constant", "linear", "sqrt", "dampened")] + [seen["no noise"]]
    assert len({tuple(t) for t in schedules}) == 5
    assert seen["alpha, no noise"] != seen["alpha, beta constant"] != seen["alpha, beta linear"]
    assert len(set(seen["momentum"][1:])) == 2  # the first state's buffer differs from a new position's
    assert len(set(seen["continuous"])) > 2 and len(set(seen["continuous, headway 2"])) > 2
    assert seen["continuous, alpha"] != seen["alpha, no noise"]


def test_headway_schedule_counters_and_padding():
    """Headway 2, r = 4, r' = 2: every state is refined for 2 steps. The state at L enters at admission, two states
    enter after every step (the second consumes ``pad_id``), so token L+1 freezes at step 2 and two tokens at every
    later step: 8 tokens (the prefill's first) take 5 steps with wavefronts of 1, 3, 4, 4, 4 states."""
    model = ClosedForm(a=0.5, q=32.0)
    res = generate(model, PROMPT, "diffusion", max_new_tokens=8, r=4, r_inner=2, freeze="fixed", eta=0.0,
                   headway=2, pad_id=7, stop_token_ids=[], trace=True)
    st = res.stats
    assert st["steps"] == 5 and st["standing_waves"] == 0
    assert st["core_passes"] == 4 + 5 * 2
    assert st["tokens_forward"] == 4 * L + 2 * (1 + 3 + 4 + 4 + 4)
    # prompt positions: the prefill's r; the states at L … L+6 two steps each; the state at L+7 entered at step 4
    assert st["recurrences_per_position"] == [4] * L + [4] * 7 + [2]
    assert st["frozen_at_step"] == [0, 2, 3, 3, 4, 4, 5, 5]  # the step that froze each token (0: the prefill)
    tr = res.trace
    assert list(tr.frozen) == [L + 1, L + 2, L + 4, L + 6, L + 8]
    # after step 1: the proposal for L+1 and the padding the second new state consumes at L+2; after step 2 the
    # proposals reach L+3 and the padding sits at L+4
    assert tr.tokens[0, L + 2] == 7 and tr.tokens[1, L + 4] == 7 and tr.tokens[1, L + 2] != 7
    # every state had 2 steps of 2 recurrences from 0: 2·(1 − 4^−2) = 1.875; the prefill's 4 recurrences alike
    assert res.tokens == [token(32.0, 1.875)] * 8


# ------------------------------------------------------------------------------------------------ adaptive freezing
def delta(m: int, a: float, r_inner: int) -> float:
    """δ after a state's m-th step from 0 with e = 1: ‖s_m − s_(m−1)‖/‖s_m‖."""
    s = [state_after(k, 0.0, 0.0, a=a, r=32, r_inner=r_inner) for k in (m - 1, m)]
    return abs(s[1] - s[0]) / abs(s[1])


def adaptive_frozen(rule: str, n_new: int, eps: float, slow: float, r_inner: int) -> list[int]:
    """Frozen tokens (prompt included) after each step, by Algorithm 2 with one new state per step: the state at L
    converges with contraction ``slow``, every later one with 0.5; a state compared at step k has had k − j steps
    (it entered after step j). ``prefix``: the leading run of states with δ < ε leave (eq. (conv)); ``last``: every
    state up to the last one with δ < ε. A leaving state freezes the token it predicts."""
    first, frozen, out = 0, L + 1, []  # first: the oldest state still in the wavefront (its offset j from L)
    k = 0
    while frozen - L < n_new:
        k += 1
        live = range(first, k)  # states present before this step's growth (the state at L + k enters after it)
        below = [delta(k - j, slow if j == 0 else 0.5, r_inner) < eps for j in live]
        if rule == "prefix":
            leave = next((i for i, b in enumerate(below) if not b), len(below))
        else:
            leave = max((i + 1 for i, b in enumerate(below) if b), default=0)
        first += leave
        frozen = L + 1 + first
        out.append(frozen)
    return out


@pytest.mark.parametrize("rule", ["prefix", "last"])
def test_adaptive_freeze_rules_by_hand(rule):
    """The state at L converges slowly (a = 0.9: δ < 0.03 at its 11th step), later ones fast (a = 0.5: at their 4th).
    ``prefix`` waits for the state at L and then freezes 8 tokens at once; ``last`` freezes past it at step 5."""
    eps, r_inner, n = 0.03, 2, 9
    want = adaptive_frozen(rule, n, eps, 0.9, r_inner)
    assert want == ([L + 1] * 10 + [L + 9] if rule == "prefix" else [L + 1] * 4 + [L + 3 + i for i in range(7)])
    model = ClosedForm(a=0.5, script="xxx" + "abcdefghijklmnop", slow={L: 0.9})
    res = generate(model, PROMPT, "diffusion", max_new_tokens=n, r=32, r_inner=r_inner, epsilon=eps, eta=0.0,
                   freeze_rule=rule, stop_token_ids=[], trace=True)
    assert list(res.trace.frozen) == want
    assert res.tokens == [ord(c) for c in "abcdefghi"]


# ------------------------------------------------------------------------------------------------ stop strings
def test_stop_string_ends_the_sequence_at_its_step():
    """Fixed freezing, r = 4, r' = 2: token L+k freezes at step k+1, so "\\n\\n" (tokens L+2, L+3) is complete after
    step 4: four tokens, stopped by the stop string, and no step after it."""
    model = ClosedForm(a=0.5, script="xxx" + "ab\n\ncdefgh")
    res = generate(model, PROMPT, "diffusion", max_new_tokens=10, r=4, r_inner=2, freeze="fixed", eta=0.0,
                   stop_token_ids=[], stop_strings=["\n\n"])
    assert res.tokens == [ord(c) for c in "ab\n\n"]
    assert res.stopped_by == "stop_string" and res.stats["steps"] == 4


def test_stop_string_among_tokens_frozen_together():
    """Prefix freezing as in :func:`test_adaptive_freeze_rules_by_hand`: step 11 freezes tokens L+1 … L+8 at once;
    the stop string ends at L+3, so the answer is cut there."""
    model = ClosedForm(a=0.5, script="xxx" + "ab\n\ncdefghijkl", slow={L: 0.9})
    res = generate(model, PROMPT, "diffusion", max_new_tokens=20, r=32, r_inner=2, epsilon=0.03, eta=0.0,
                   stop_token_ids=[], stop_strings=["\n\n"])
    assert res.tokens == [ord(c) for c in "ab\n\n"]
    assert res.stopped_by == "stop_string" and res.stats["steps"] == 11
    # without the stop string the same run goes on past step 11
    more = generate(model, PROMPT, "diffusion", max_new_tokens=20, r=32, r_inner=2, epsilon=0.03, eta=0.0,
                    stop_token_ids=[])
    assert more.stopped_by == "length" and more.stats["steps"] > 11
