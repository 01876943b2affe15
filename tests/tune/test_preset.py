"""Presets: written by the tune, composed by Hydra as ``sampler=tuned/<name>`` over the structured node of their sampler
(diffusion or LoopSpec) with the timing batch they were tuned at, read by ``recdiff.load_preset`` for
``recdiff.generate`` (the sampler's name among its keyword arguments); a preset used elsewhere than it was tuned
warns in one line naming the difference; a knob the sampler does not have is one line (RecdiffError, or exit 2 from
sweep.py); an existing preset file is never replaced without being told."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

import recdiff
from recdiff.device import Device, describe
from recdiff.errors import RecdiffError
from recdiff.params import DiffusionParams, LoopSpecParams, Provenance
from recdiff.presets import PresetWarning, load_preset, mismatch, read_preset, settings, write_preset
from recdiff.schema import make_plan
from recdiff.study.identity import config_hash
from tests.sweep_helpers import requires_fixture

REPO = Path(__file__).resolve().parents[2]
SEARCHED = ["r_inner", "beta", "beta_schedule", "eta", "epsilon", "wavefront", "headway", "init_scale"]
WHERE = Provenance(name="embedded-cpu-b1", device="cpu (Some CPU)", torch="2.13.0", model="recdiff/assets/embedded",
                   weights="abc123", dtype="float32", timing_batch=1, benchmark="compose limit=48 offset=0",
                   held_out="compose limit=48 offset=48", study="tune-embedded-compose-cpu-b1", date="2026-11-27",
                   result="4.2x")


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    """A copy of conf/ where a test may write presets."""
    shutil.copytree(REPO / "conf", tmp_path / "conf", ignore=shutil.ignore_patterns("tuned"))
    return tmp_path / "conf"


def composed(conf: Path, *overrides: str):
    import recdiff.schema  # noqa: F401  (the structured-config schemas)

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            return make_plan(compose(config_name="config", overrides=list(overrides)))
    finally:
        GlobalHydra.instance().clear()


def tuned(r_inner: int = 1, epsilon: float = 0.2) -> DiffusionParams:
    return DiffusionParams(r_inner=r_inner, epsilon=epsilon, headway=2, r=16)


def test_a_preset_round_trips_through_hydra_and_the_api(conf):
    sampler = tuned()
    values = settings(sampler, SEARCHED)
    # every searched knob, and the other settings where they differ from the defaults (r=16)
    assert set(values) == {*SEARCHED, "r"} and values["r"] == 16 and values["beta_schedule"] == "linear"
    path = write_preset(conf / "sampler" / "tuned" / "embedded-cpu-b1.yaml", values, WHERE, "run.batch_size=1")
    plan = composed(conf, "sampler=tuned/embedded-cpu-b1")
    assert plan.sampler.params() == sampler.params()            # every setting, the unstated ones at their defaults
    assert plan.sampler.preset == WHERE and plan.run.timing_batch == 1
    # where it came from is not a setting: the same configuration as the same settings given by hand
    by_hand = composed(conf, "sampler.r_inner=1", "sampler.epsilon=0.2", "sampler.headway=2", "sampler.r=16")
    assert config_hash(plan) == config_hash(by_hand)
    # the API reads the same file into generate's keyword arguments
    assert load_preset(path) == {"sampler": "diffusion", **sampler.params()}
    assert read_preset(path).preset == WHERE


def test_a_loopspec_preset_round_trips_through_hydra_the_api_and_generate(conf):
    """A LoopSpec preset composes the loopspec node (``sampler=tuned/<name>`` in a sweep), and ``load_preset`` names
    the sampler among generate's keyword arguments: ``generate(model, ids, **load_preset(name))`` runs LoopSpec, whose
    greedy tokens are static AR's at r with per-step caches."""
    sampler = LoopSpecParams(r=32, r_draft=8)
    values = settings(sampler, ["r_draft", "r_draft2"])
    assert values == {"r_draft": 8, "r_draft2": None}          # every searched knob, null too; r at its default
    where = dataclasses.replace(WHERE, name="ls-b1")
    path = write_preset(conf / "sampler" / "tuned" / "ls-b1.yaml", values, where, "run.batch_size=1",
                        sampler="loopspec")
    text = path.read_text()
    assert "- /sampler/loopspec@sampler" in text and text.splitlines()[1].startswith("# The loopspec sampler tuned")
    plan = composed(conf, "sampler=tuned/ls-b1")
    assert isinstance(plan.sampler, LoopSpecParams) and plan.sampler.params() == sampler.params()
    assert plan.sampler.preset == where and plan.run.timing_batch == 1
    by_hand = composed(conf, "sampler=loopspec", "sampler.r_draft=8")
    assert config_hash(plan) == config_hash(by_hand)
    kwargs = load_preset(path)
    assert kwargs == {"sampler": "loopspec", "r": 32, "r_draft": 8, "init_scale": 0.0, "kv_cache": "per_step"}
    assert read_preset(path).preset == where
    model = recdiff.load_model("recdiff/assets/embedded")
    ids = [[5, 17, 3, 9, 12, 1, 7]]
    got = recdiff.generate(model, ids, max_new_tokens=6, **kwargs)
    want = recdiff.generate(model, ids, max_new_tokens=6, sampler="static", r=32, kv_cache="per_step")
    assert got[0].tokens == want[0].tokens


def test_a_preset_naming_no_sampler_is_one_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("# @package _global_\ndefaults:\n- /sampler/diffusionn@sampler\n- _self_\nsampler:\n  r: 16\n")
    with pytest.raises(RecdiffError, match=r"'/sampler/diffusionn@sampler' names no sampler \(static, ") as err:
        load_preset(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_load_preset_finds_a_name_under_conf_and_names_what_is_there(monkeypatch, conf):
    from recdiff import presets

    monkeypatch.setattr(presets, "PRESET_DIR", conf / "sampler" / "tuned")
    write_preset(conf / "sampler" / "tuned" / "mine.yaml", settings(tuned(), SEARCHED), WHERE, "")
    assert recdiff.load_preset("mine")["r_inner"] == 1
    with pytest.raises(RecdiffError, match=r"preset 'other': no file .*other.yaml \(presets in .*: mine\)"):
        load_preset("other")


@pytest.mark.parametrize("line, message", [
    ("r_innr: 2", r"unknown config key 'r_innr' \(did you mean 'r_inner'\?\)"),
    ("r_inner: four", r"r_inner"),
    ("r_inner: 64", r"r_inner=64 exceeds r=32"),
])
def test_a_bad_knob_is_one_line(tmp_path, line, message):
    path = tmp_path / "bad.yaml"
    path.write_text(f"# @package sampler\ndefaults:\n  - /sampler/diffusion@_here_\n  - _self_\n{line}\n")
    with pytest.raises(RecdiffError, match=message) as err:
        load_preset(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


@pytest.mark.slow
def test_sweep_refuses_a_preset_with_an_unknown_knob_in_one_line_with_exit_2():
    tuned_dir = REPO / "conf" / "sampler" / "tuned"
    path = tuned_dir / "test-unknown-knob.yaml"
    tuned_dir.mkdir(parents=True, exist_ok=True)
    path.write_text("# @package sampler\ndefaults:\n  - /sampler/diffusion@_here_\n  - _self_\nwavefrnt: 64\n")
    try:
        proc = subprocess.run([sys.executable, str(REPO / "sweep.py"), "sampler=tuned/test-unknown-knob"], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
    finally:
        path.unlink()
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: unknown config key 'sampler.wavefrnt' (did you mean "
                                                "'wavefront'?)"]


def test_another_device_model_or_batch_is_named_in_one_line():
    assert mismatch(WHERE, Device("cpu", "Some CPU"), "abc123", 1) is None
    assert mismatch(WHERE, None, None, None) is None                    # unknown parts are not compared
    assert mismatch(WHERE, Device("cpu"), "abc123", 1) is None          # a CPU whose name is unknown
    text = mismatch(WHERE, Device("cuda", "NVIDIA H100 80GB HBM3"), "abc123", 1)
    assert "device cuda (NVIDIA H100 80GB HBM3), tuned on cpu (Some CPU)" in text and "\n" not in text
    assert "device cpu (Other CPU), tuned on cpu (Some CPU)" in mismatch(WHERE, Device("cpu", "Other CPU"), None, 1)
    text = mismatch(WHERE, Device("cpu", "Some CPU"), "fff000", 32)
    assert "model weights fff000, tuned with recdiff/assets/embedded (weights abc123)" in text
    assert "run.timing_batch=32, tuned at run.timing_batch=1" in text and "device" not in text


def test_a_preset_composes_the_timing_batch_it_was_tuned_at(conf):
    """sampler=tuned/<name> times what the preset claims: a batch-32 preset sets run.timing_batch=32, so the sweep's
    warning compares like with like and says nothing; a timing batch given on the command line wins, and is named."""
    b32 = dataclasses.replace(WHERE, name="mine-b32", timing_batch=32)
    write_preset(conf / "sampler" / "tuned" / "mine-b32.yaml", settings(tuned(), SEARCHED), b32, "")
    plan = composed(conf, "sampler=tuned/mine-b32")
    assert plan.run.timing_batch == 32 and plan.sampler.preset.timing_batch == 32
    assert mismatch(plan.sampler.preset, Device("cpu", "Some CPU"), "abc123", plan.run.timing_batch) is None
    given = composed(conf, "sampler=tuned/mine-b32", "run.timing_batch=1")
    assert given.run.timing_batch == 1
    assert "run.timing_batch=1, tuned at run.timing_batch=32" in mismatch(given.sampler.preset, None, None, 1)


def test_a_preset_written_before_timing_batch_still_composes_and_loads(conf):
    """The older layout (``# @package sampler``, the provenance's ``batch_size``) reads as before, its batch size as
    the timing batch; it sets no timing batch of its own."""
    path = conf / "sampler" / "tuned" / "old.yaml"
    path.parent.mkdir()
    path.write_text("# @package sampler\ndefaults:\n- /sampler/diffusion@_here_\n- _self_\nr_inner: 2\npreset:\n"
                    "  name: old\n  device: cpu (Some CPU)\n  batch_size: 32\n  study: s\n")
    plan = composed(conf, "sampler=tuned/old")
    assert plan.sampler.r_inner == 2 and plan.run.timing_batch == 1
    assert plan.sampler.preset.timing_batch == 32 and plan.sampler.preset.batch_size is None
    params = read_preset(path)
    assert params.r_inner == 2 and params.preset.timing_batch == 32


def test_an_existing_preset_is_replaced_only_when_told(tmp_path):
    path = write_preset(tmp_path / "p.yaml", settings(tuned(), SEARCHED), WHERE, "")
    before = path.read_text()
    with pytest.raises(RecdiffError) as err:
        write_preset(path, settings(tuned(r_inner=2), SEARCHED), WHERE, "")
    assert str(err.value) == (f"preset {path} exists: tune.overwrite=true replaces it, tune.name=<name> writes "
                              "another")
    assert path.read_text() == before and [p.name for p in tmp_path.iterdir()] == ["p.yaml"]   # no temporary left
    write_preset(path, settings(tuned(r_inner=2), SEARCHED), WHERE, "", overwrite=True)
    assert read_preset(path).r_inner == 2


def test_load_preset_with_a_model_warns_when_it_runs_elsewhere(tmp_path):
    here = dataclasses.replace(WHERE, device=describe("cpu").label, weights=None)
    path = write_preset(tmp_path / "p.yaml", settings(tuned(), SEARCHED), here, "")
    model = SimpleNamespace(device="cpu", source=str(tmp_path / "no-such-checkpoint"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")                                  # the same device: no warning
        load_preset(path, model=model)
    elsewhere = write_preset(tmp_path / "q.yaml", settings(tuned(), SEARCHED), WHERE, "")
    with pytest.warns(PresetWarning, match=r"device cpu \(.*\), tuned on cpu \(Some CPU\)"):
        load_preset(elsewhere, model=model)


@pytest.mark.slow
@requires_fixture
def test_a_sweep_with_a_preset_tuned_elsewhere_warns_in_one_line(tmp_path):
    from tests.sweep_helpers import TINY, run_sweep

    tuned_dir = REPO / "conf" / "sampler" / "tuned"
    path = tuned_dir / f"test-elsewhere-{tmp_path.name}.yaml"
    write_preset(path, settings(DiffusionParams(r=4, r_inner=2), SEARCHED), WHERE, "")
    try:
        proc = run_sweep([*TINY, f"sampler=tuned/{path.stem}", f"study.storage={tmp_path}/j.log",
                          f"study.artifact_dir={tmp_path}/art", f"hydra.run.dir={tmp_path}/run"])
    finally:
        path.unlink()
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "is used elsewhere than it was tuned" in ln]
    assert len(lines) == 1
    assert f"device {describe('cpu').label}, tuned on cpu (Some CPU)" in lines[0]
    assert "tuned with recdiff/assets/embedded (weights abc123)" in lines[0]      # the fixture's weights differ


@pytest.mark.parametrize("path", sorted((REPO / "conf" / "sampler" / "tuned").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_committed_preset_composes_and_loads(path):
    plan = composed(REPO / "conf", f"sampler=tuned/{path.stem}")
    assert plan.sampler.preset is not None and plan.sampler.preset.name == path.stem
    assert load_preset(path) == {"sampler": plan.sampler.name, **plan.sampler.params()}
