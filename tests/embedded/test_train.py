"""The training recipe: Huginn's recurrence sampling, the LR schedule, and a very short run that learns."""

import math

import torch

from recdiff import train


def test_poisson_lognormal_recurrence_draws():
    gen = torch.Generator().manual_seed(0)
    draws = [train.sample_recurrence(16, 4, gen) for _ in range(4000)]
    p = [a + b for a, b in draws]
    assert min(p) >= 1
    assert all(b == min(4, a + b) and a == max(a + b - 4, 0) for a, b in draws)
    # E[Poisson(LogNormal(mu, .5))] = exp(mu + .5**2/2) = mean; p = that + 1
    assert abs(sum(p) / len(p) - 17) < 0.6
    # heavy right tail of the lognormal: some draws go well past 2x the mean, some are short
    assert max(p) > 32 and min(p) < 8


def test_trapezoid_lr():
    f = lambda prog, step: train.lr_factor(prog, step, warmup=10, cooldown_frac=0.25, min_frac=0.0)  # noqa: E731
    assert math.isclose(f(0.0, 0), 0.1)
    assert f(0.5, 100) == 1.0
    assert math.isclose(f(0.875, 1000), 0.5)
    assert f(1.0, 2000) == 0.0


def test_short_run_lowers_loss_and_checkpoint_round_trips(tmp_path):
    import recdiff.load as load

    cfg = {
        "threads": 1, "out_dir": str(tmp_path / "run"),
        "model": {"n_embd": 32, "n_heads": 2, "num_key_value_heads": 2, "n_layers_in_prelude": 1,
                  "n_layers_in_recurrent_block": 1, "n_layers_in_coda": 1, "intermediate_size": 64,
                  "block_size": 256, "mean_recurrence": 3, "mean_backprop_depth": 2},
        "tokenizer": {"vocab_size": 320, "corpus": 300},
        "train": {"batch_size": 8, "lr": 1e-2, "warmup_steps": 5, "max_steps": 60, "time_budget_s": 0,
                  "log_every": 1000, "checkpoint_every_s": 0, "eval_every_s": 0},
    }
    res = train.run_training(cfg, log=lambda s: None)
    losses = [h["loss"] for h in res["history"]]
    assert res["steps"] == 60
    first, last = sum(losses[:5]) / 5, sum(losses[-10:]) / 10
    assert first > 4.5            # ~ln(vocab) at init
    assert last < first - 1.5     # learned at least the answer format

    model = load.load_model(tmp_path / "run" / "final")
    assert model.tokenizer is not None and model.tokenizer.eos_token_id == res["tokenizer"].token_to_id("<|end_of_text|>")
    ids = torch.tensor([res["encoder"].encode(next(train.arith.iter_split("test", 1)))[0]])
    trained = res["model"].eval()
    with torch.no_grad():
        a, _ = trained.forward(ids, r=3, init_scale=0.0)
        b, _ = model.forward(ids, r=3, init_scale=0.0)
    torch.testing.assert_close(a, b)

    # a later curriculum stage continues from that checkpoint: same weights and tokenizer, loss picks up where it was
    cont = train.run_training({**cfg, "out_dir": str(tmp_path / "stage2"), "init_from": str(tmp_path / "run" / "final"),
                               "data": {"steps_per_line": 0},
                               "train": {**cfg["train"], "max_steps": 3, "lr": 1e-6}}, log=lambda s: None)
    assert cont["tokenizer"].get_vocab() == res["tokenizer"].get_vocab()
    first_cont = cont["history"][0]["loss"]
    assert first_cont < first - 1.0, (first_cont, first)


def test_curriculum_moves_from_one_step_per_line_to_the_final_layout():
    stream = train.arith.iter_split("train", 0, steps_per_line=0)
    cur = train.Curriculum(steps_per_line=0, start=1, frac=0.5, seed=0)

    def lines(progress, n=400):
        return [len(cur(next(stream), progress).solution.split("\n")) - 1 for _ in range(n)]

    assert all(n == 1 for n in lines(0.6))              # past the ramp: the whole chain in one line
    probs = [next(stream) for _ in range(400)]
    early = [cur(p, 0.0) for p in probs]                 # start of the ramp: one sentence per line
    assert all(len(e.solution.split("\n")) - 1 == len(p.steps) - 1 for e, p in zip(early, probs))
    assert all(e.answer == p.answer and e.question == p.question for e, p in zip(early, probs))
    multi = [len(p.steps) > 2 for p in probs]          # problems whose layouts differ
    mid = [len(cur(p, 0.25).solution.split("\n")) - 1 == 1 for p, m in zip(probs, multi) if m]
    assert 0.35 < sum(mid) / len(mid) < 0.65            # halfway up the ramp: about half in the final layout
    assert train.Curriculum(0, 1, 0.0, 0)(probs[0], 0.0) is probs[0]   # frac 0: no curriculum
