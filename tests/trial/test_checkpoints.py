"""Checkpoints that cannot give a meaningful measurement fail in one line naming the file, before any trial."""

from __future__ import annotations

import shutil

import pytest

import recdiff
from recdiff.errors import RecdiffError
from recdiff.trial import check_tokenizer
from tests.sweep_helpers import EMBEDDED, FIXTURE, TINY, requires_fixture, run_sweep

pytestmark = pytest.mark.slow


@requires_fixture
def test_a_checkpoint_without_tokenizer_on_a_text_benchmark_names_the_missing_file(tmp_path):
    # it used to fall back to bytes silently and record accuracy 0.000 as a COMPLETE trial
    args = [*TINY, "model.tokenizer=checkpoint", f"study.storage={tmp_path}/j.log",
            f"study.artifact_dir={tmp_path}/art", f"hydra.run.dir={tmp_path}/run"]
    proc = run_sweep(args, check=False, timeout=120)
    assert proc.returncode == 2 and not (tmp_path / "j.log").exists()
    assert proc.stderr.strip().splitlines() == [
        f"error: {FIXTURE.resolve() / 'tokenizer.json'} not found: benchmark arith needs the checkpoint's tokenizer "
        "(model.tokenizer=bytes feeds UTF-8 bytes as token ids, for test checkpoints)"]


@pytest.mark.skipif(not (EMBEDDED / "tokenizer.json").exists(), reason="embedded model not shipped")
def test_byte_prompts_are_only_for_checkpoints_without_a_tokenizer():
    check_tokenizer(FIXTURE, "bytes", "arith")                      # the fixture opts in (conf/model/fixture.yaml)
    with pytest.raises(RecdiffError, match=r"model.tokenizer=bytes, but the checkpoint has .*tokenizer.json"):
        check_tokenizer(EMBEDDED, "bytes", "arith")
    check_tokenizer(EMBEDDED, "checkpoint", "arith")


@requires_fixture
def test_a_model_trained_on_other_compose_permutations_is_refused(tmp_path):
    """A checkpoint carries the compose task it learned (compose.json); scoring it against other permutations would
    record a meaningless accuracy as COMPLETE."""
    import json

    from recdiff.benchmarks import compose

    model = tmp_path / "model"
    shutil.copytree(FIXTURE, model, ignore=shutil.ignore_patterns("perturbed", "*tablets*", "generate*", "forward*"))
    d = compose.definition()
    d["permutations"]["a"], d["permutations"]["b"] = d["permutations"]["b"], d["permutations"]["a"]
    (model / compose.DEFINITION_FILE).write_text(json.dumps(d))
    args = ["model=fixture", f"model.path={model}", "benchmark=compose", "benchmark.limit=1", "run.max_new_tokens=2",
            f"study.storage={tmp_path}/j.log", f"study.artifact_dir={tmp_path}/art", f"hydra.run.dir={tmp_path}/run"]
    proc = run_sweep(args, check=False, timeout=120)
    assert proc.returncode == 2 and not (tmp_path / "j.log").exists(), proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"error: compose: the model at {model} was trained on other permutations than recdiff.benchmarks.compose "
        f"defines ({model / compose.DEFINITION_FILE}); its answers cannot be scored here"]


@requires_fixture
@pytest.mark.parametrize("damage", ["truncated", "not safetensors"])
def test_a_corrupt_weights_file_is_one_error_naming_it(tmp_path, damage):
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(FIXTURE / "config.json", model / "config.json")
    data = (FIXTURE / "model.safetensors").read_bytes()
    (model / "model.safetensors").write_bytes(data[: len(data) // 2] if damage == "truncated" else b"\x00" * 64)
    with pytest.raises(RecdiffError, match=rf"^{model / 'model.safetensors'} is not a readable safetensors file"):
        recdiff.load_model(model)
    proc = run_sweep([*TINY, f"model.path={model}", f"study.storage={tmp_path}/j.log",
                      f"study.artifact_dir={tmp_path}/art", f"hydra.run.dir={tmp_path}/run"], check=False, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith(f"error: {model / 'model.safetensors'} is not a readable safetensors file")
