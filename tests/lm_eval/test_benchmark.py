"""lm-eval tasks as sweep benchmarks (``benchmark=lm_eval benchmark.task=<name>``): a sweep records lm-eval's metric
as the trial's accuracy under a study named after the task, whose identity holds the task's name and version; the
task's ``max_gen_toks`` bounds the answers; bad input is one line before any model loads."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("lm_eval", reason='lm-eval is not installed: pip install -e ".[lm-eval]"')

from recdiff.benchmarks import get_benchmark
from recdiff.benchmarks.arith import generate_split
from recdiff.benchmarks.gsm8k import flexible_extract, is_match
from recdiff.errors import RecdiffError
from tests.lm_eval.conftest import write_jsonl
from tests.sweep_helpers import compose_cfg, load, run_sweep

pytestmark = pytest.mark.slow


@pytest.fixture
def arith_file(tmp_path: Path) -> Path:
    """Embedded-model-sized GSM8K-format documents (their answers end in "#### N")."""
    return write_jsonl(tmp_path / "arith.jsonl", [{"question": p.question, "answer": p.solution}
                                                   for p in generate_split("test", 6)])


def test_a_sweep_records_lm_evals_metric(tmp_path, arith_file):
    storage = tmp_path / "journal.log"
    run_sweep(["model=embedded_arith", "benchmark=lm_eval", "benchmark.task=gsm8k_cot", f"benchmark.path={arith_file}",
               "benchmark.n_shot=0",
               "benchmark.filter=flexible-extract", "benchmark.limit=6", "sampler=static", "sampler.r=4",
               "run.speed_samples=1", "run.warmup=0", "run.max_new_tokens=48", "run.progress=false",
               "study.baselines=false", f"study.storage={storage}", f"study.artifact_dir={tmp_path / 'art'}",
               f"hydra.run.dir={tmp_path / 'run'}"],
              env={"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}, timeout=600)
    study = load(str(storage), "embedded_arith-gsm8k_cot")            # named after the task, not "lm_eval"
    (trial,) = study.trials
    assert trial.state.name == "COMPLETE"
    identity = trial.user_attrs["identity"]["benchmark"]
    assert identity["task"] == "gsm8k_cot" and identity["task_version"] == 3.0
    import polars as pl

    rows = pl.read_parquet(trial.user_attrs["samples_path"]).to_dicts()
    # lm-eval's flexible-extract exact match, judged here by the hand-written scorer (the same, tests/lm_eval/
    # test_gsm8k_parity.py) from the answers the trial recorded
    judged = [is_match(flexible_extract(r["output"]), r["reference"]) for r in rows]
    assert [r["correct"] for r in rows] == judged
    assert trial.values[0] == pytest.approx(sum(judged) / len(rows))
    assert all(r["prompt"].startswith("Q: ") and r["prompt"].endswith("\nA:") for r in rows)   # lm-eval's 0-shot


def test_the_tasks_max_gen_toks_bounds_the_answers(tmp_path, arith_file):
    import lm_eval

    from recdiff.schema import make_plan
    from recdiff.trial import prepare, run_trial

    cot = Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k-cot.yaml"
    (tmp_path / "short.yaml").write_text(
        f"include: {cot}\ntask: gsm8k_cot_short\nnum_fewshot: 0\ngeneration_kwargs:\n  until: ['Q:']\n"
        "  do_sample: false\n  max_gen_toks: 5\n")
    cfg = compose_cfg(["model=embedded_arith", "benchmark=lm_eval", "benchmark.task=gsm8k_cot_short",
                       f"benchmark.include_path={tmp_path}",
                       f"benchmark.path={arith_file}", "benchmark.limit=3", "sampler=static", "sampler.r=4",
                       "run.speed_samples=1", "run.warmup=0", "run.progress=false", "run.n_traces=0"])
    plan = make_plan(cfg)
    work = prepare(plan.model, plan.benchmark).load(plan.run.threads)
    assert work.benchmark.stop_strings == ["Q:"]
    result = run_trial(work, plan.trial, tmp_path / "trial")
    assert [r["new_tokens"] for r in result.rows] == [5, 5, 5]   # the arith model's answers are longer


@pytest.mark.parametrize("options, message", [
    ({"task": "gsm8k_cott"}, "unknown lm-eval task 'gsm8k_cott' (did you mean gsm8k_cot"),
    ({"task": "arc_easy"}, "lm-eval task 'arc_easy' is multiple_choice, not generate_until: a sweep measures "
                           "samplers"),   # refused before its dataset would download
    ({"task": "gsm8k", "path": "ARITH"}, "lm-eval task 'gsm8k' also needs its split 'train' (few-shot examples)"),
    ({"task": "gsm8k_cot", "filter": "loose"}, "lm_eval: task 'gsm8k_cot' has no filter 'loose' (it has strict-match, "
                                              "flexible-extract)"),
    ({"task": "gsm8k_cot", "metric": "acc"}, "lm_eval: task 'gsm8k_cot' has no metric 'acc' (it has exact_match)"),
    ({"task": "ai2_arc"}, "lm-eval 'ai2_arc' is a group or tag of several tasks; name one task"),
    ({}, "benchmark=lm_eval needs benchmark.task=<an lm-eval task name>"),
    ({"task": "gsm8k_cot", "path": "/nonexistent.jsonl"}, "benchmark.path=/nonexistent.jsonl not found"),
])
def test_bad_input_is_one_line(arith_file, options, message):
    if options.get("path") == "ARITH" or (options.get("task") == "gsm8k_cot" and "path" not in options):
        options = {**options, "path": str(arith_file)}   # local data: the hub is out of reach
    with pytest.raises(RecdiffError) as err:
        get_benchmark("lm_eval", **options)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_an_unknown_task_fails_the_sweep_before_the_model_loads(tmp_path):
    proc = run_sweep(["benchmark=lm_eval", "benchmark.task=gsm8k_cott", f"study.storage={tmp_path / 'j.log'}",
                      f"hydra.run.dir={tmp_path / 'run'}"], check=False, env={"HF_DATASETS_OFFLINE": "1"})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: unknown lm-eval task 'gsm8k_cott' (did you mean")
    assert not (tmp_path / "j.log").exists()
