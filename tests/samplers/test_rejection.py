"""LoopSpec's speculative rejection sampling with two proposals (recdiff/samplers/rejection.py) draws the committed
token from the full-depth distribution exactly, whatever the early readouts proposed: checked by a chi-square test
over many draws against the target itself, with a twin whose residual is deliberately wrong (after a rejection it
draws from the target again, the classic mistake), which the same test rejects: the test has the power to see it."""

from __future__ import annotations

import pytest
import torch

from recdiff.samplers import rejection

DRAWS = 4000
# a target and two proposals that disagree with it and with each other: every branch of the procedure is taken
P = torch.tensor([0.40, 0.20, 0.15, 0.10, 0.10, 0.05])
Q1 = torch.tensor([0.10, 0.45, 0.10, 0.20, 0.05, 0.10])
Q2 = torch.tensor([0.30, 0.10, 0.35, 0.10, 0.10, 0.05])


def committed(p: torch.Tensor, q1: torch.Tensor, q2: torch.Tensor | None, seed: int = 0) -> tuple[list[int], list[int]]:
    """Tokens committed over DRAWS rounds (q1 draws, q2 proposes from its residual, the target verifies) and which
    proposal each was."""
    g = torch.Generator().manual_seed(seed)
    tokens, which = [], []
    for _ in range(DRAWS):
        x = rejection.draw(q1, g)
        r = None if q2 is None else rejection.second_proposal(q1, q2, x)
        y = None if r is None else rejection.draw(r, g)
        t, w = rejection.verify(p, q1, x, r, y, g)
        tokens.append(t)
        which.append(w)
    return tokens, which


def p_value(tokens: list[int], p: torch.Tensor) -> float:
    from scipy.stats import chisquare  # here: scipy.stats takes ~1.4 s to import, paid by the worker that tests

    counts = torch.bincount(torch.tensor(tokens), minlength=len(p)).double()
    expected = p.double() / p.double().sum() * len(tokens)
    return float(chisquare(counts.numpy(), expected.numpy()).pvalue)


@pytest.mark.parametrize("q2", [None, Q2], ids=["q1 only", "q1 and q2"])
def test_the_committed_token_is_distributed_as_the_target(q2):
    tokens, which = committed(P, Q1, q2)
    assert p_value(tokens, P) > 1e-3
    assert {0, 1} <= set(which) and (q2 is None or 2 in set(which))   # every branch was taken


def test_an_unnormalised_top_p_cut_target_is_sampled_exactly():
    """Top-p leaves rows that do not sum to one, with zeros: the procedure normalises them and never commits a token
    outside the target's nucleus."""
    p = torch.tensor([0.40, 0.20, 0.15, 0.0, 0.0, 0.0])
    tokens, _ = committed(p, Q1, Q2, seed=1)
    assert set(tokens) <= {0, 1, 2}
    assert p_value(tokens, p[:3]) > 1e-3


def test_a_wrong_residual_is_seen(monkeypatch):
    """The twin: after a rejection the token is drawn from the target again, not from the residual; the same
    test then rejects the draws at any sensible level."""
    monkeypatch.setattr(rejection, "residual", lambda target, proposal: target / target.sum())
    tokens, _ = committed(P, Q1, Q2)
    assert p_value(tokens, P) < 1e-6


def test_the_second_proposal_excludes_the_first_and_stands_back_where_q2_agrees():
    r = rejection.second_proposal(Q1, Q2, 1)
    assert r is not None and r[1] == 0 and torch.isclose(r.sum(), torch.tensor(1.0))
    assert torch.equal(r > 0, (Q2 > Q1) & (torch.arange(6) != 1))
    assert rejection.second_proposal(Q1, Q2, 0) is None            # q2 thinks more of q1's token: no second guess
