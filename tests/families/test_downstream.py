"""What runs a checkpoint runs a family folder: ``python -m recdiff.bench --models DIR``, a sweep
(``python sweep.py model=fixture model.path=DIR``, ``model.family=`` checked before any compute) and lm-eval
(``python -m recdiff.lm_eval --model recdiff --model_args pretrained=DIR,...``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from recdiff import load_model
from recdiff.tools.speed import main as bench_main
from recdiff.tools.speed import read_bytes
from tests.conftest import REPO
from tests.families.conftest import SHIPPED

pytestmark = pytest.mark.slow

LLAMA, OLMO = SHIPPED / "llama_gqa2", SHIPPED / "olmo_mha"
PARCAE = REPO / "tests" / "fixtures" / "parcae_tiny" / "bytes300_downstream"  # a vocabulary that holds byte tokens


def test_bench_runs_a_family_folder_and_counts_its_bytes(capsys):
    bench_main(["--models", str(LLAMA), "--samplers", "static r=8", "--prompts", "1", "--max-new-tokens", "3",
                "--modes", "batch-1 eager", "--bound"])
    out = capsys.readouterr().out
    assert f"## {LLAMA}: 0.17M parameters" in out and "static r=8" in out and "GB per token" in out
    model = load_model(LLAMA)
    rb, cfg, t = read_bytes(model), model.config, model.transformer
    assert rb.kv == 2 * cfg.num_key_value_heads * cfg.head_dim * 4  # the KV heads' width (GQA), float32
    head = model.lm_head.weight.numel() * 4  # untied: its own matrix
    assert rb.coda == sum(p.numel() for p in [*t.coda.parameters(), *t.ln_f.parameters()]) * 4 + head


def _sweep(args, tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    base = [f"hydra.sweep.dir={tmp_path}/sweep", f"hydra.run.dir={tmp_path}/run", f"study.storage={tmp_path}/j.log",
            f"study.artifact_dir={tmp_path}/artifacts", "benchmark=arith", "benchmark.limit=1",
            "run.max_new_tokens=2", "run.warmup=0", "run.threads=1", "run.progress=false", "study.baselines=false"]
    return subprocess.run([sys.executable, str(REPO / "sweep.py"), *base, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("d, family", [(OLMO, None), (LLAMA, "retro_llama")], ids=["recognised", "named"])
def test_a_sweep_runs_a_family_folder(tmp_path, d, family):
    args = ["model=fixture", f"model.path={d}", "sampler.r=8", "sampler.r_inner=2"]
    proc = _sweep(args + ([f"model.family={family}"] if family else []), tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (proc.stdout + proc.stderr).count("COMPLETE accuracy=") == 1
    result = json.loads(next(tmp_path.rglob("result.json")).read_text())
    assert result["state"] == "COMPLETE"


def test_a_sweep_naming_the_wrong_family_is_one_line(tmp_path):
    proc = _sweep(["model=fixture", f"model.path={OLMO}", "model.family=huginn"], tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "does not fit model family huginn" in lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_a_sweep_runs_a_parcae_entry_from_a_folder(tmp_path):
    """conf/model/parcae_140m with model.path=DIR: the diffusion sampler on the Parcae family in a sweep."""
    args = ["model=parcae_140m", f"model.path={PARCAE}", "model.tokenizer=bytes", "model.compile=false",
            "model.device=cpu", "sampler=diffusion", "sampler.r=8", "sampler.r_inner=2"]
    proc = _sweep(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (proc.stdout + proc.stderr).count("COMPLETE accuracy=") == 1


@pytest.mark.slow
@pytest.mark.parametrize("src, family", [(LLAMA, "retro_llama"), (PARCAE, "parcae")], ids=["retro_llama", "parcae"])
def test_lm_eval_decodes_with_a_family_model(tmp_path, src, family):
    pytest.importorskip("lm_eval", reason='lm-eval is not installed: pip install -e ".[lm-eval]"')
    from recdiff.tokenizer import build_byte_tokenizer, save_tokenizer
    from tests.lm_eval.conftest import GSM8K_ROWS, write_jsonl
    from tests.lm_eval.test_model import gsm8k_cot_local

    d = tmp_path / family
    shutil.copytree(src, d)
    save_tokenizer(build_byte_tokenizer(), d, model_max_length=256)  # bytes: ids 4 … 259 of its 300
    gsm8k_cot_local(tmp_path, write_jsonl(tmp_path / "gsm8k.jsonl", GSM8K_ROWS[:3]))
    stats = tmp_path / "stats.jsonl"
    args = f"pretrained={d},family={family},sampler=diffusion,r=8,r_inner=2,stats_file={stats}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "recdiff.lm_eval", "--model", "recdiff", "--model_args", args,
                           "--tasks", "gsm8k_cot_local", "--include_path", str(tmp_path), "--gen_kwargs",
                           "max_gen_toks=4", "--output_path", str(tmp_path / "out")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(next((tmp_path / "out").rglob("results_*.json")).read_text())
    assert "exact_match,flexible-extract" in results["results"]["gsm8k_cot_local"]
    lines = [json.loads(line) for line in stats.read_text().splitlines()]
    assert sorted(line["doc_id"] for line in lines) == [0, 1, 2]
    assert all(line["sampler"] == "diffusion" and line["core_passes"] > 0 for line in lines)


def test_a_named_family_is_part_of_the_identity_and_the_hash():
    """Left at null (recognised), model.family changes neither: the hashes of trials recorded before it existed
    still match (tests/study/test_old_journal.py)."""
    from recdiff import RecdiffError
    from recdiff.study.identity import config_hash, identity_from_config
    from tests.sweep_helpers import compose_plan

    base, named = compose_plan(["model=fixture"]), compose_plan(["model=fixture", "model.family=huginn"])
    assert config_hash(base) != config_hash(named)
    assert "family" not in identity_from_config(base.as_dict())["model"]
    assert identity_from_config(named.as_dict())["model"]["family"] == "huginn"
    with pytest.raises(RecdiffError, match="unknown model family 'gemma'"):
        compose_plan(["model.family=gemma"])


@pytest.mark.parametrize("entry", sorted(p.stem for p in (REPO / "conf" / "model").glob("parcae_*.yaml")))
def test_each_parcae_entry_runs_offline_from_a_folder(entry):
    """conf/model's Parcae entries: the hub id (SandyResearch/parcae-...), and offline a folder of the family."""
    from recdiff import RecdiffError
    from recdiff.trial.workload import prepare
    from tests.sweep_helpers import compose_plan

    plan = compose_plan([f"model={entry}", "benchmark=arith", "benchmark.limit=1"])
    assert plan.model.path.startswith("SandyResearch/parcae-") and plan.model.family == "parcae"
    local = ["model.tokenizer=bytes", "model.device=cpu", "model.compile=false", "benchmark=arith", "benchmark.limit=1"]
    plan = compose_plan([f"model={entry}", f"model.path={PARCAE}", *local])
    assert prepare(plan.model, plan.benchmark).load().model.config.family == "parcae"
    plan = compose_plan([f"model={entry}", f"model.path={OLMO}", *local])
    with pytest.raises(RecdiffError, match="does not fit model family parcae"):
        prepare(plan.model, plan.benchmark)


@pytest.mark.parametrize("entry", sorted(p.stem for p in (REPO / "conf" / "model").glob("recurrent_*.yaml")))
def test_each_published_checkpoint_entry_runs_offline_from_a_folder(entry):
    """conf/model's entry of a published retrofit, with model.path=DIR (a folder of its family): the plan checks,
    the folder fits the entry's family and loads; nothing is downloaded."""
    from recdiff import RecdiffError
    from recdiff.trial.workload import prepare
    from tests.sweep_helpers import compose_plan

    plan = compose_plan([f"model={entry}", "benchmark=arith", "benchmark.limit=1"])
    assert plan.model.path.startswith("smcleish/Recurrent-") and plan.model.family in ("retro_llama", "retro_olmo")
    d, other = (LLAMA, OLMO) if plan.model.family == "retro_llama" else (OLMO, LLAMA)
    local = ["model.tokenizer=bytes", "model.device=cpu", "model.compile=false"]
    plan = compose_plan([f"model={entry}", f"model.path={d}", *local, "benchmark=arith", "benchmark.limit=1"])
    assert prepare(plan.model, plan.benchmark).load().model.config.family == plan.model.family
    plan = compose_plan([f"model={entry}", f"model.path={other}", *local, "benchmark=arith", "benchmark.limit=1"])
    with pytest.raises(RecdiffError, match=f"does not fit model family {plan.model.family}"):
        prepare(plan.model, plan.benchmark)
