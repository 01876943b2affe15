"""``python -m recdiff.bench`` (a script that prints figures; nothing here is timed): the stacked matrices of its
product floor are one recurrence's, and a small run prints every section."""

from __future__ import annotations

import torch

from recdiff.bench import build, main, recurrence_matrices


def test_floor_multiplies_exactly_one_recurrences_weights():
    model = build("embedded", "cpu", None)
    t = model.transformer
    own = [t.adapter.weight] + [p for p in t.core_block.parameters() if p.dim() == 2]
    stacked = recurrence_matrices(model)
    assert len(stacked) == len({w.shape[1] for w in own}) == 3  # E (qkv, proj, fc), 2E (adapter), I (mlp.proj)
    assert sum(w.numel() for w in stacked) == sum(w.numel() for w in own)
    x = {w.shape[1]: torch.randn(2, w.shape[1]) for w in own}
    got = torch.cat([x[w.shape[1]] @ w.T for w in stacked], 1)
    want = torch.cat([torch.cat([x[w.shape[1]] @ w.T for w in own if w.shape[1] == width], 1)
                      for width in dict.fromkeys(w.shape[1] for w in own)], 1)
    torch.testing.assert_close(got, want)


def test_bench_prints_rates_costs_and_ratios(capsys):
    main(["--models", "embedded", "--samplers", "static r=32,diffusion defaults", "--prompts", "1",
          "--max-new-tokens", "4", "--modes", "batch-1 eager"])
    out = capsys.readouterr().out
    assert "static r=32" in out and "diffusion defaults" in out
    assert "cost per core row·recurrence" in out and "256 rows:" in out
    assert "ratio diffusion defaults / static r=32 — batch-1 eager:" in out
