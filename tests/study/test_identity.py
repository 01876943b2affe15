"""Study identity: trials measured under another benchmark slice, model, dtype or generation setting never land in one
study (refused before the model loads, one line naming the keys); a study is named after the model it ran."""

from __future__ import annotations

import json
import shutil

import optuna
import pytest

import recdiff.trial
from recdiff.errors import RecdiffError
from recdiff.study.connect import open_storage, open_study
from recdiff.study.grid import run_grid_trial
from recdiff.study.identity import check_identity, conflict, identity_from_config, trial_identity, weights_digest
from tests.study.fakes import FakeWork, fake_run_trial
from tests.sweep_helpers import FIXTURE, TINY, compose_cfg, compose_plan, load, requires_fixture, run_sweep


def ident(*overrides: str, weights: str | None = "w1") -> dict:
    return identity_from_config(compose_plan(list(overrides)).as_dict(), weights=weights, dtype="float32")


@pytest.mark.slow
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
    study = open_study(plan.study, open_storage(plan.study.storage))
    run_grid_trial(plan, study, FakeWork, tmp_path / "job", ident("benchmark.limit=32"))
    check_identity(study, ident("benchmark.limit=32", "sampler.r_inner=8"))       # same identity: fine
    with pytest.raises(RecdiffError, match=r"study 'i' holds trials measured otherwise \(trial 0\): "
                                           r"benchmark.limit=2 here, 32 there\. .*another study.name"):
        check_identity(study, ident("benchmark.limit=2"))
    # trials recorded before identities existed are judged by their config
    legacy = compose_plan(["benchmark.limit=7"]).as_dict()
    study.add_trial(optuna.trial.create_trial(values=[0.1, 1.0], params={}, distributions={},
                                              user_attrs={"config": legacy}))
    with pytest.raises(RecdiffError, match=r"\(trial 1\): benchmark.limit=32 here, 7 there"):
        check_identity(study, ident("benchmark.limit=32"))


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


H100 = {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3"}


def test_the_device_is_part_of_the_identity_over_the_whole_study():
    cpu = {"kind": "cpu", "name": "AMD EPYC 7763 64-Core Processor"}
    here = identity_from_config(compose_plan().as_dict(), weights="w1", device=cpu)
    assert here["device"] == cpu
    assert conflict(here, identity_from_config(compose_plan().as_dict(), weights="w1", device=dict(cpu))) == []
    assert [d[0] for d in conflict(here, ident(weights="w1") | {"device": H100})] == ["device.kind", "device.name"]
    other_cpu = {"kind": "cpu", "name": "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"}
    assert [d[:3] for d in conflict(here, ident() | {"device": other_cpu})] == [
        ("device.name", cpu["name"], other_cpu["name"])]
    # study-wide: another benchmark of the study may not bring another device either
    assert [d[0] for d in conflict(here, ident("benchmark=gsm8k") | {"device": other_cpu})] == ["device.name"]
    # unknown on one side (a CPU named only by its kind, a trial that never said): not a conflict
    assert conflict(here, ident() | {"device": {"kind": "cpu"}}) == [] and conflict(here, ident()) == []


def test_trials_recorded_before_the_identity_held_the_device_are_judged_by_their_device_attribute():
    legacy = {"config": compose_plan().as_dict()}
    assert trial_identity(legacy | {"device": "cuda:1 (NVIDIA H100 80GB HBM3)"})["device"] == H100
    # an older CPU attribute names the architecture and torch's threads, not the processor: its name is unknown
    assert trial_identity(legacy | {"device": "cpu (x86_64, 4 threads)"})["device"] == {"kind": "cpu"}
    assert "device" not in trial_identity(legacy)
    # the identity's own device wins over the attribute
    recorded = {"identity": ident() | {"device": {"kind": "cpu", "name": "A"}}, "device": "cpu (x86_64, 1 threads)"}
    assert trial_identity(recorded)["device"] == {"kind": "cpu", "name": "A"}


EMBEDDED_TINY = ["benchmark.limit=1", "run.max_new_tokens=2", "run.warmup=0", "run.threads=1", "run.progress=false",
                 "study.baselines=false", "model.device=cpu"]


def plant(storage: str, plan, user_attrs: dict) -> None:
    """A trial measured elsewhere, as another worker (or an older version) recorded it."""
    study = open_study(plan.study, open_storage(storage))
    study.add_trial(optuna.trial.create_trial(values=[1.0, 10.0], params={}, distributions={},
                                              user_attrs={"config": plan.as_dict(), **user_attrs}))


@pytest.mark.parametrize("attrs, refused", [
    ({"device": "cuda (NVIDIA H100 80GB HBM3)"}, "device.kind='cpu' here, 'cuda' there; device.name="),  # older trial
    ({"identity_device": {"kind": "cpu", "name": "Other CPU"}}, "device.name="),
    ({"device": "cpu (x86_64, 4 threads)"}, None),                 # an older CPU trial: its name unknown, kind the same
])
def test_a_study_measured_on_another_device_is_refused_before_the_model_loads(tmp_path, monkeypatch, attrs,
                                                                               refused):
    from recdiff.device import describe
    from recdiff.study.job import open_checked_study
    from recdiff.trial import prepare, workload

    monkeypatch.setattr(workload, "load_model_cached", lambda *a, **k: pytest.fail("the model loaded"))
    plan = compose_plan([*EMBEDDED_TINY, f"study.storage={tmp_path}/j.log", "study.name=dev"])
    if "identity_device" in attrs:
        attrs = {"identity": identity_from_config(plan.as_dict(), device=attrs["identity_device"])}
    plant(plan.study.storage, plan, attrs)
    prepared = prepare(plan.model, plan.benchmark)
    if refused is None:
        _, identity = open_checked_study(plan, prepared, tmp_path)
        assert identity["device"] == describe("cpu").identity()
        return
    with pytest.raises(RecdiffError) as err:
        open_checked_study(plan, prepared, tmp_path)
    line = str(err.value)
    assert line.startswith("study 'dev' holds trials measured otherwise (trial 0): ") and refused in line
    assert f"device.name={describe('cpu').name!r} here" in line and "\n" not in line


@pytest.mark.slow
def test_a_sweep_on_another_device_is_refused_in_one_line_with_exit_2(tmp_path):
    """The acceptance case: ``sweep.py ... model.device=cpu`` into a study whose trial was timed on an H100 (recorded
    by an older version: only its ``device`` attribute says so)."""
    from recdiff.device import describe

    where = [f"study.storage={tmp_path}/j.log", f"study.artifact_dir={tmp_path}/art", "study.name=dev"]
    plan = compose_plan([*EMBEDDED_TINY, *where])
    plant(plan.study.storage, plan, {"device": "cuda (NVIDIA H100 80GB HBM3)"})
    proc = run_sweep([*EMBEDDED_TINY, *where, f"hydra.run.dir={tmp_path}/run"], check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"error: study 'dev' holds trials measured otherwise (trial 0): device.kind='cpu' here, 'cuda' there; "
        f"device.name={describe('cpu').name!r} here, 'NVIDIA H100 80GB HBM3' there. Trials measured differently "
        "never share a study: set another study.name, or the study's settings"]
    assert len(load(f"{tmp_path}/j.log", "dev").get_trials()) == 1       # nothing recorded
