"""The training recipe: Huginn's recurrence sampling, the LR schedule, and very short runs that learn."""

import json
import math

import pytest
import torch

from recdiff.benchmarks import arith, compose
from recdiff.tools import train
from recdiff.tools.train_data import LevelCurriculum

pytestmark = pytest.mark.slow


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


SMALL = {"n_embd": 32, "n_heads": 2, "num_key_value_heads": 2, "n_layers_in_prelude": 1,
         "n_layers_in_recurrent_block": 1, "n_layers_in_coda": 1, "intermediate_size": 64,
         "block_size": 256, "mean_recurrence": 3, "mean_backprop_depth": 2}
FAST = {"batch_size": 8, "lr": 1e-2, "warmup_steps": 5, "max_steps": 60, "time_budget_s": 0,
        "log_every": 1000, "checkpoint_every_s": 0, "eval_every_s": 0}


def test_recipe_defaults_are_the_compose_config():
    """recdiff.tools.train's DEFAULTS and conf/train/compose.yaml state one recipe."""
    from pathlib import Path

    import yaml

    conf = yaml.safe_load((Path(__file__).resolve().parents[2] / "conf/train/compose.yaml").read_text())
    conf.pop("hydra")
    assert conf == train.DEFAULTS


def test_short_run_lowers_loss_and_checkpoint_round_trips(tmp_path):
    """The default recipe (compose, long answers) for 60 steps of a small model: the loss falls from the uniform
    guess to the answer format; the checkpoint loads as the trained model, carries the task, and continues."""
    import recdiff.checkpoint as load

    cfg = {"threads": 1, "out_dir": str(tmp_path / "run"), "model": SMALL, "data": {"format": "long"}, "train": FAST}
    res = train.run_training(cfg, log=lambda s: None)
    losses = [h["loss"] for h in res["history"]]
    assert res["steps"] == 60
    first, last = sum(losses[:5]) / 5, sum(losses[-10:]) / 10
    assert first > 4.5            # ~ln(vocab) at init
    assert last < first - 2.5     # learned at least the answer format

    folder = tmp_path / "run" / "final"
    assert json.loads((folder / compose.DEFINITION_FILE).read_text())["format"] == "long"
    model = load.load_model(folder)
    assert model.tokenizer is not None and (
        model.tokenizer.eos_token_id == res["tokenizer"].token_to_id("<|end_of_text|>"))
    ids = torch.tensor([res["encoder"].encode(compose.generate_split("test", 1)[0])[0]])
    trained = res["model"].eval()
    with torch.no_grad():
        a, _ = trained.forward(ids, r=3, init_scale=0.0)
        b, _ = model.forward(ids, r=3, init_scale=0.0)
    torch.testing.assert_close(a, b)

    # a later stage continues from that checkpoint: same weights and tokenizer, loss picks up where it was
    cont = train.run_training({**cfg, "out_dir": str(tmp_path / "stage2"), "init_from": str(folder),
                               "train": {**FAST, "max_steps": 3, "lr": 1e-6}}, log=lambda s: None)
    assert cont["tokenizer"].get_vocab() == res["tokenizer"].get_vocab()
    first_cont = cont["history"][0]["loss"]
    assert first_cont < first - 2.0, (first_cont, first)


def test_level_curriculum_rises_once_a_level_is_solved():
    """EMA 0.95 of the batch exact match: all-correct batches reach 0.8 at the 32nd (1 - 0.95**32 = 0.806, 31 give
    0.796); the mean restarts at each level, half-solved batches never reach it, and the level stops at max."""
    from types import SimpleNamespace

    level = SimpleNamespace(value=2)
    cur = LevelCurriculum(level, threshold=0.8, max_level=4)
    ups = [cur.update(1.0) for _ in range(64)]
    assert [i + 1 for i, u in enumerate(ups) if u] == [32, 64] and level.value == 4
    assert not any(cur.update(1.0) for _ in range(100)) and level.value == 4   # at max_level
    level.value = 1
    half = LevelCurriculum(level, threshold=0.8, max_level=4)
    assert not any(half.update(0.5) for _ in range(500)) and level.value == 1


def test_arith_task_still_trains(tmp_path):
    """The previous model's recipe (conf/train/embedded_arith.yaml): BPE tokenizer trained on its corpus."""
    res = train.run_training({"threads": 1, "out_dir": str(tmp_path / "run"), "model": SMALL,
                              "data": {"task": "arith", "steps_per_line": 0},
                              "tokenizer": {"vocab_size": 320, "corpus": 300},
                              "train": {**FAST, "max_steps": 30}}, log=lambda s: None)
    losses = [h["loss"] for h in res["history"]]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 1.0
    assert not (tmp_path / "run" / "final" / compose.DEFINITION_FILE).exists()


def test_unknown_task_is_one_line():
    from recdiff.errors import RecdiffError

    with pytest.raises(RecdiffError, match="data.task='hops': choose one of compose, arith"):
        train.run_training({"data": {"task": "hops"}}, log=lambda s: None)


def test_curriculum_moves_from_one_step_per_line_to_the_final_layout():
    stream = arith.iter_split("train", 0, steps_per_line=0)
    cur = arith.Curriculum(steps_per_line=0, start=1, frac=0.5, seed=0)

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
    assert arith.Curriculum(0, 1, 0.0, 0)(probs[0], 0.0) is probs[0]   # frac 0: no curriculum
