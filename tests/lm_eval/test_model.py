"""The lm-eval model ``recdiff`` (recdiff/lm_eval/model.py), run by lm-eval itself.

- The command line on a local 20-problem GSM8K-format task whose references are built from the arith embedded model's
  greedy answers (decoded here with ``recdiff.generate``): half are the number the answer ends with, half are not,
  so lm-eval's flexible-extract score is known before lm-eval runs; its strict-match score, its logged answers and
  the per-request statistics side file are checked too.
- ``loglikelihood`` and ``loglikelihood_rolling`` against the model's own log-probabilities, one sequence at a time.
- Bad input: one line.

The fast tier (``make test-fast``) runs the adapter's own checks of its arguments (no lm-eval run); the rest is
``slow``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lm_eval", reason='lm-eval is not installed: pip install -e ".[lm-eval]"')
import torch

import recdiff
from recdiff.benchmarks.arith import generate_split
from recdiff.benchmarks.gsm8k import flexible_extract, is_match, strict_extract
from recdiff.errors import RecdiffError
from tests.lm_eval.conftest import ARITH_MODEL, REPO, write_jsonl

UNTIL = ["Q:", "</s>", "<|im_end|>"]          # gsm8k_cot's generation_kwargs
SAMPLER = dict(sampler="diffusion", r_inner=4, epsilon=0.03)


def gsm8k_cot_local(folder: Path, data: Path, name: str = "gsm8k_cot_local") -> None:
    """lm-eval's own gsm8k_cot task (its YAML included), zero-shot, on a local file."""
    import lm_eval

    cot = Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k-cot.yaml"
    (folder / f"{name}.yaml").write_text(
        f"include: {cot}\ntask: {name}\ndataset_path: json\ndataset_name: null\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data}\nnum_fewshot: 0\n")


def greedy_answers(model, questions: list[str]) -> list[str]:
    """What the backend must return: recdiff.generate over lm-eval's prompts, cut at the task's stop strings."""
    from recdiff.tokenizer import encode_prompt

    tok = model.tokenizer
    prompts = [encode_prompt(tok, f"Q: {q}\nA:") for q in questions]
    limits = [min(256, model.config.block_size - 1 - len(p)) for p in prompts]
    results = recdiff.generate(model, prompts, max_new_tokens=limits, stop_strings=UNTIL, batch_size=32, **SAMPLER)
    out = []
    for res in results:
        text = tok.decode(res.tokens, skip_special_tokens=True)
        cuts = [text.find(s) for s in UNTIL + [tok.eos_token] if s in text]
        out.append(text[:min(cuts)] if cuts else text)
    return out


@pytest.mark.slow
def test_command_line_scores_known_answers(tmp_path):
    model = recdiff.load_model(ARITH_MODEL)
    questions = [p.question for p in generate_split("test", 20)]
    answers = greedy_answers(model, questions)
    rows, refs = [], []
    for i, (q, a) in enumerate(zip(questions, answers)):
        numbers = re.findall(r"-?\d+", a)
        last = int(numbers[-1]) if numbers else 7
        ref = last if i % 2 == 0 and numbers else last + 1     # even: the answer's last number; odd: another
        refs.append(str(ref))
        rows.append({"question": q, "answer": f"The solution.\n#### {ref}"})
    expected_flexible = sum(is_match(flexible_extract(a), r) for a, r in zip(answers, refs)) / 20
    expected_strict = sum(is_match(strict_extract(a), r) for a, r in zip(answers, refs)) / 20
    assert expected_flexible == sum(1 for i, a in enumerate(answers) if i % 2 == 0 and re.search(r"\d", a)) / 20 > 0
    data = write_jsonl(tmp_path / "gsm8k.jsonl", rows)
    gsm8k_cot_local(tmp_path, data)
    stats = tmp_path / "stats.jsonl"
    args = ",".join([f"pretrained={ARITH_MODEL}", *(f"{k}={v}" for k, v in SAMPLER.items()), "batch_size=32",
                     f"stats_file={stats}"])
    proc = run_gsm8k_local(tmp_path, args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"gsm8k_cot_local\|.*\|flexible-extract\|", proc.stdout), proc.stdout   # lm-eval's table

    results = json.loads(next((tmp_path / "out").rglob("results_*.json")).read_text())
    scores = results["results"]["gsm8k_cot_local"]
    assert scores["exact_match,flexible-extract"] == pytest.approx(expected_flexible)
    assert scores["exact_match,strict-match"] == pytest.approx(expected_strict)
    got = responses(tmp_path)
    assert [got[i] for i in range(20)] == answers

    assert results["config"]["recdiff_stats_file"] == str(stats)
    lines = [json.loads(line) for line in stats.read_text().splitlines()]
    assert sorted(line["doc_id"] for line in lines) == list(range(20))
    for line in lines:
        assert line["task"] == "gsm8k_cot_local" and line["sampler"] == "diffusion"
        assert line["core_passes"] > 0 and line["steps"] > 0 and line["tokens_per_s"] > 0
        assert line["tokens_per_s"] == pytest.approx(line["new_tokens"] / line["time_s"])


def run_gsm8k_local(tmp_path, args: str) -> subprocess.CompletedProcess:
    """lm-eval's command line on the local GSM8K task written in ``tmp_path``, offline, samples logged to ``out``."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "recdiff.lm_eval", "--model", "recdiff", "--model_args", args,
                           "--tasks", "gsm8k_cot_local", "--include_path", str(tmp_path), "--log_samples",
                           "--output_path", str(tmp_path / "out")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)


def responses(tmp_path) -> dict[int, str]:
    """doc_id → the logged response (one record per document and filter)."""
    samples = [json.loads(line) for line in next((tmp_path / "out").rglob("samples_*.jsonl")).read_text().splitlines()]
    return {s["doc_id"]: s["resps"][0][0] for s in samples}


@pytest.mark.slow
def test_loopspec_answers_as_static_ar_at_r32(tmp_path):
    """``sampler=loopspec,r_draft=4,r_draft2=null`` through lm-eval's command line: under greedy decoding every answer
    is static AR r=32's (per-step caches), decoded here with ``recdiff.generate``."""
    from recdiff.tokenizer import encode_prompt

    model = recdiff.load_model(ARITH_MODEL)
    questions = [p.question for p in generate_split("test", 8)]
    static = dict(sampler="static", r=32, kv_cache="per_step")
    prompts = [encode_prompt(model.tokenizer, f"Q: {q}\nA:") for q in questions]
    results = recdiff.generate(model, prompts, max_new_tokens=[min(256, 255 - len(p)) for p in prompts],
                               stop_strings=UNTIL, batch_size=8, **static)
    cut = [model.tokenizer.decode(r.tokens, skip_special_tokens=True) for r in results]
    expected = [t[:min([t.find(s) for s in UNTIL + [model.tokenizer.eos_token] if s in t], default=len(t))]
                for t in cut]
    data = write_jsonl(tmp_path / "gsm8k.jsonl", [{"question": q, "answer": "#### 1"} for q in questions])
    gsm8k_cot_local(tmp_path, data)
    args = f"pretrained={ARITH_MODEL},sampler=loopspec,r_draft=4,r_draft2=null,batch_size=8,stats_file={tmp_path}/s"
    proc = run_gsm8k_local(tmp_path, args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = responses(tmp_path)
    assert [got[i] for i in range(len(questions))] == expected
    lines = [json.loads(line) for line in (tmp_path / "s").read_text().splitlines()]
    assert {line["sampler"] for line in lines} == {"loopspec"} and all(line["steps"] > 0 for line in lines)


# ------------------------------------------------------------------------------------------- log-likelihoods


def direct_logprob(model, context: list[int], target: list[int], r: int) -> float:
    """Sum of log p(target | context) from one unpadded forward pass of this sequence alone."""
    ids = torch.tensor([context + target[:-1]])
    with torch.inference_mode():
        logits, _ = model(ids, r)
    logp = torch.log_softmax(logits[0].float(), dim=-1)[len(context) - 1:]
    return float(logp.gather(-1, torch.tensor(target)[:, None]).sum())


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """lm-eval's results of a multiple-choice and a rolling-log-likelihood task, decoded by static AR at r=8."""
    from lm_eval.evaluator import simple_evaluate
    from lm_eval.tasks import TaskManager

    import recdiff.lm_eval  # noqa: F401

    folder = tmp_path_factory.mktemp("loglikelihood")
    problems = generate_split("test", 6)
    choice_rows = [{"question": p.question, "choices": [f"{p.answer}", f"{p.answer + 1}", f"{p.answer * 2 + 3}"],
                    "label": 0} for p in problems]
    long_text = " ".join(p.question for p in generate_split("test", 10))   # 256 < tokens <= 512
    text_rows = [{"text": problems[0].question}, {"text": long_text}]
    write_jsonl(folder / "choice.jsonl", choice_rows)
    write_jsonl(folder / "text.jsonl", text_rows)
    (folder / "choice.yaml").write_text(
        "task: arith_choice_local\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {folder}/choice.jsonl\n"
        "test_split: test\noutput_type: multiple_choice\ndoc_to_text: \"Q: {{question}}\\nA:\"\n"
        "doc_to_choice: \"{{choices}}\"\ndoc_to_target: label\nmetric_list:\n"
        "  - metric: acc\nmetadata:\n  version: 1.0\n")
    (folder / "text.yaml").write_text(
        f"task: arith_text_local\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {folder}/text.jsonl\n"
        "test_split: test\noutput_type: loglikelihood_rolling\ndoc_to_text: \"\"\ndoc_to_target: \"{{text}}\"\n"
        "metric_list:\n  - metric: word_perplexity\nmetadata:\n  version: 1.0\n")
    res = simple_evaluate(model="recdiff", model_args={"pretrained": str(ARITH_MODEL), "sampler": "static", "r": 8,
                                                       "batch_size": 4},
                          tasks=["arith_choice_local", "arith_text_local"], bootstrap_iters=0,
                          task_manager=TaskManager(include_path=str(folder)), log_samples=True)
    return res, choice_rows, text_rows


@pytest.mark.slow
def test_multiple_choice_is_scored_at_r(scored):
    res, rows, _ = scored
    model = recdiff.load_model(ARITH_MODEL)
    tok = model.tokenizer
    correct = 0
    for sample in sorted(res["samples"]["arith_choice_local"], key=lambda s: s["doc_id"]):
        row = rows[sample["doc_id"]]
        direct = []
        for ctx, choice in sample["arguments"]:     # ("Q: ...\nA:", " 17"): lm-eval puts its " " before a choice
            assert ctx == f"Q: {row['question']}\nA:" and choice.strip() in row["choices"]
            context = tok.encode(ctx)
            direct.append(direct_logprob(model, context, tok.encode(ctx + choice)[len(context):], 8))
        lm = [resp[0][0] for resp in sample["resps"]]
        assert lm == pytest.approx(direct, abs=1e-3)
        correct += max(range(3), key=direct.__getitem__) == row["label"]
    assert res["results"]["arith_choice_local"]["acc,none"] == pytest.approx(correct / len(rows))


@pytest.mark.slow
def test_rolling_loglikelihood_windows_over_the_context(scored):
    res, _, rows = scored
    model = recdiff.load_model(ARITH_MODEL)
    tok, block = model.tokenizer, model.config.block_size
    got = {s["doc_id"]: s["resps"][0][0] for s in res["samples"]["arith_text_local"]}
    short = tok.encode(rows[0]["text"])
    assert got[0] == pytest.approx(direct_logprob(model, [tok.bos_token_id], short, 8), abs=1e-3)
    t = tok.encode(rows[1]["text"])
    assert block < len(t) <= 2 * block                 # two windows: the first block, then the rest
    first = direct_logprob(model, [tok.bos_token_id], t[:block], 8)
    rest = direct_logprob(model, t[len(t) - block - 1:block], t[block:], 8)   # the rest, after the block before it
    assert got[1] == pytest.approx(first + rest, abs=1e-3)


# ------------------------------------------------------------------------------------------------ bad input


@pytest.mark.slow
def test_an_unknown_task_is_one_line(capsys):
    from recdiff.lm_eval.__main__ import main

    code = main(["--model", "recdiff", "--model_args", f"pretrained={ARITH_MODEL}", "--tasks", "gsm8k_cott"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1] == "error: Tasks not found: gsm8k_cott"
    assert not any("Traceback" in line for line in err)


@pytest.mark.parametrize("args, message", [
    ({"sampler": "diffusion", "r_inner": 4.5}, "lm-eval model_args: diffusion sampler: r_inner=4.5 must be an integer"),
    ({"sampler": "diffusion", "epsilon": "small"}, "lm-eval model_args: diffusion sampler: epsilon='small' must be"),
    ({"sampler": "static", "r_inner": 4}, "lm-eval model_args: unknown parameter 'r_inner' for sampler 'static'"),
    ({"batch_size": "many"}, "lm-eval model_args: batch_size='many' must be an integer >= 1 or auto"),
    ({"sampler": "loopspec", "r_draft": 3}, "lm-eval model_args: loopspec sampler: r_draft=3 must divide r=32"),
    ({"sampler": "loopspec", "r_draft2": "nul"}, "lm-eval model_args: loopspec sampler: r_draft2='nul' must be null"),
    ({"sampler": "loopspec", "kv_cache": "shared"}, "lm-eval model_args: loopspec sampler: kv_cache='shared' must be"),
])
def test_a_sampler_parameter_of_the_wrong_type_is_one_line(args, message):
    from recdiff.lm_eval import RecdiffLM

    # as lm-eval parses --model_args: "4.5" arrives as a float, "small" as a string
    with pytest.raises(RecdiffError, match=re.escape(message)) as err:
        RecdiffLM.create_from_arg_obj({"pretrained": str(ARITH_MODEL), **args}, {"batch_size": 1, "device": "cuda:0"})
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("unset", ["null", "none", "None"])
def test_an_unset_parameter_reads_as_null_or_none(unset):
    from recdiff.lm_eval import RecdiffLM

    lm = RecdiffLM.create_from_arg_string(f"pretrained={ARITH_MODEL},sampler=loopspec,r_draft=4,r_draft2={unset}")
    assert lm.params.values() == {"r": 32, "r_draft": 4, "r_draft2": None, "init_scale": 0.0, "kv_cache": "per_step"}
    assert lm.given == {"r_draft": 4, "r_draft2": None} and lm.r == 32   # scored at LoopSpec's full depth


def test_generation_arguments_recdiff_cannot_honour_are_one_line():
    from lm_eval.api.instance import Instance

    from recdiff.lm_eval import RecdiffLM

    lm = RecdiffLM(pretrained=str(ARITH_MODEL), r=4)
    req = Instance("generate_until", {}, ("Q: 1+1?\nA:", {"until": ["Q:"], "top_k": 5}), 0)
    with pytest.raises(RecdiffError, match=r"^generation argument\(s\) top_k not supported by recdiff's samplers"):
        lm.generate_until([req])
    req = Instance("generate_until", {}, ("Q: 1+1?\nA:", {"until": ["Q:"], "max_gen_toks": 3}), 0)
    assert isinstance(lm.generate_until([req], disable_tqdm=True)[0], str)   # the same request, honoured
