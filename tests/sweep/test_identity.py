"""Study identity: trials measured under another benchmark slice, model, dtype or generation setting never land in one
study (refused before the model loads, one line naming the keys); a study is named after the model it ran."""

from __future__ import annotations

import json
import shutil

import optuna
import pytest

import recdiff.trial
from recdiff import study as rs
from recdiff.errors import RecdiffError
from recdiff.study.identity import conflict, identity_from_config, weights_digest

from .conftest import FIXTURE, TINY, compose_cfg, compose_plan, load, requires_fixture, run_sweep
from .fakes import FakeWork, fake_run_trial


def ident(*overrides: str, weights: str | None = "w1") -> dict:
    return identity_from_config(compose_plan(list(overrides)).as_dict(), weights=weights, dtype="float32")


def test_identity_holds_what_changes_a_measurement_and_nothing_else():
    base = ident()
    assert base["benchmark"]["limit"] == 200 and base["model"] == {
        "path": "recdiff/assets/embedded", "weights": "w1", "dtype": "float32", "tokenizer": "checkpoint"}
    assert base["run"] == {"max_new_tokens": 256, "temperature": 0.0, "top_p": 1.0}
    for same in (["sampler.r_inner=8"], ["run.seed=3"], ["study.name=x"], ["run.threads=1"], ["worker=2"]):
        assert conflict(base, ident(*same)) == [], same
    for key, override in [("benchmark.limit", "benchmark.limit=2"), ("benchmark.offset", "benchmark.offset=4"),
                          ("benchmark.seed", "benchmark.seed=1"), ("run.max_new_tokens", "run.max_new_tokens=8"),
                          ("run.temperature", "run.temperature=0.7"), ("run.top_p", "run.top_p=0.9"),
                          ("model.tokenizer", "model.tokenizer=bytes")]:
        assert [d[0] for d in conflict(base, ident(override))] == [key], key
    assert [d[0] for d in conflict(base, ident(weights="w2"))] == ["model.weights"]
    # the same weights under another path are the same model; other weights under the same path are not
    assert conflict(base, ident("model.path=/copy/of/embedded")) == []
    assert [d[0] for d in conflict(base, ident("model.path=/other", weights="w2"))] == ["model.path", "model.weights"]
    # another benchmark may share the study (Table 1), another model or temperature may not
    assert conflict(base, ident("benchmark=gsm8k")) == []
    assert [d[0] for d in conflict(base, ident("benchmark=gsm8k", "run.temperature=1.0"))] == ["run.temperature"]


def test_weights_digest_follows_the_bytes(tmp_path):
    a, b = tmp_path / "a.safetensors", tmp_path / "b" / "a.safetensors"
    b.parent.mkdir()
    a.write_bytes(b"weights")
    b.write_bytes(b"weights")
    assert weights_digest([a]) == weights_digest([b])
    b.write_bytes(b"other weights")
    assert weights_digest([a]) != weights_digest([b])


def test_a_run_measured_otherwise_is_refused_naming_the_keys(tmp_path, monkeypatch):
    monkeypatch.setattr(recdiff.trial, "run_trial", fake_run_trial([]))
    base = [f"study.storage={tmp_path}/j.log", f"study.artifact_dir={tmp_path}/art", "study.name=i"]
    plan = compose_plan([*base, "benchmark.limit=32"])
    study = rs.open_study(plan.study, rs.open_storage(plan.study.storage))
    rs.run_grid_trial(plan, study, FakeWork, tmp_path / "job", ident("benchmark.limit=32"))
    rs.check_identity(study, ident("benchmark.limit=32", "sampler.r_inner=8"))       # same identity: fine
    with pytest.raises(RecdiffError, match=r"study 'i' holds trials measured otherwise \(trial 0\): "
                                           r"benchmark.limit=2 here, 32 there\. .*another study.name"):
        rs.check_identity(study, ident("benchmark.limit=2"))
    # trials recorded before identities existed are judged by their config
    legacy = compose_plan(["benchmark.limit=7"]).as_dict()
    study.add_trial(optuna.trial.create_trial(values=[0.1, 1.0], params={}, distributions={},
                                              user_attrs={"config": legacy}))
    with pytest.raises(RecdiffError, match=r"\(trial 1\): benchmark.limit=32 here, 7 there"):
        rs.check_identity(study, ident("benchmark.limit=32"))


@pytest.mark.slow
@requires_fixture
def test_a_sweep_with_another_benchmark_slice_is_refused_and_records_nothing(tmp_path):
    args = [*TINY, "sampler=static", "sampler.r=1", "study.name=slice", f"study.storage={tmp_path}/j.log",
            f"study.artifact_dir={tmp_path}/art", f"hydra.run.dir={tmp_path}/run"]
    run_sweep(args)
    proc = run_sweep([*args, "benchmark.limit=2"], check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: study 'slice' holds trials measured otherwise (trial 0): benchmark.limit=2 here, "
                           "1 there."), line
    study = load(f"{tmp_path}/j.log", "slice")
    (t,) = study.get_trials()
    identity = t.user_attrs["identity"]
    assert identity["benchmark"]["limit"] == 1 and len(identity["model"]["weights"]) == 16
    assert identity["model"]["dtype"] == "float32" and identity["model"]["tokenizer"] == "bytes"
    assert json.loads((tmp_path / "run" / "result.json").read_text())["user_attrs"]["identity"] == identity


@pytest.mark.slow
@requires_fixture
def test_other_weights_under_the_same_path_are_refused(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(FIXTURE, model, ignore=shutil.ignore_patterns("perturbed", "*tablets*", "generate*", "forward*"))
    args = [*TINY, "sampler=static", "sampler.r=1", f"model.path={model}", "study.name=weights",
            f"study.storage={tmp_path}/j.log", f"study.artifact_dir={tmp_path}/art", f"hydra.run.dir={tmp_path}/run"]
    run_sweep(args)
    shutil.copy(FIXTURE / "perturbed" / "model.safetensors", model / "model.safetensors")   # retrained in place
    proc = run_sweep(args, check=False, timeout=120)
    assert proc.returncode == 2 and "model.weights=" in proc.stderr and "Traceback" not in proc.stderr
    assert len(load(f"{tmp_path}/j.log", "weights").get_trials()) == 1


def test_a_study_is_named_after_the_model_it_runs():
    assert compose_cfg().study.name == "embedded-compose"
    assert compose_cfg(["model=embedded_arith", "benchmark=arith"]).study.name == "embedded_arith-arith"
    assert compose_cfg(["model.path=/ckpts/raven-step-5000"]).study.name == "raven-step-5000-compose"
    assert compose_cfg(["model=huginn_0125", "model.path=/data/mine/"]).study.name == "mine-compose"
    assert compose_cfg(["model.path=/ckpts/x", "model.name=variant"]).study.name == "variant-compose"
    assert compose_cfg(["sweeps=table1", "model.path=/ckpts/x"]).study.name == "table1-x"
