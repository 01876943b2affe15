"""A sweep over the wavefront W (and over headway) keeps one model, with its programs and graphs, across its trials
in one process: with the graph path (emulated on a CPU, ``RECDIFF_EMULATE_GRAPHS=1``) every trial completes and
decodes the eager trials' tokens (a sweep over W once stopped at its second trial on a GPU)."""

from __future__ import annotations

import csv
import json

import pytest

from tests.sweep_helpers import TINY, load, run_sweep

pytestmark = pytest.mark.slow


def outputs(tmp_path, name: str, env: dict, sweep: list[str]) -> dict[str, list[str]]:
    storage = tmp_path / name / "journal.log"
    run_sweep(["-m", *TINY, "benchmark.limit=2", "run.max_new_tokens=6", "run.speed_samples=1", *sweep,
               f"study.storage={storage}", f"study.artifact_dir={tmp_path / name / 'artifacts'}",
               f"hydra.sweep.dir={tmp_path / name / 'sweep'}", "study.name=walk"], timeout=600, env=env)
    trials = load(str(storage), "walk").get_trials()
    out = {}
    for t in trials:
        assert t.state.name == "COMPLETE", t.number
        key = json.dumps({k: v for k, v in t.params.items()}, sort_keys=True)
        with open(t.user_attrs["output_dir"] + "/samples.csv") as f:
            out[key] = [row["output"] for row in csv.DictReader(f)]
    return out


def test_a_sweep_over_shape_settings_runs_every_trial_on_the_graph_path(tmp_path):
    # W and headway both change between trials (the window's rows: the state's buffers and the step's shapes)
    sweep = ["sweeps=wavefront", "sampler.wavefront=16,4", "sampler.headway=2,1"]
    graphs = outputs(tmp_path, "graphs", {"RECDIFF_EMULATE_GRAPHS": "1"}, sweep)
    eager = outputs(tmp_path, "eager", {"RECDIFF_EMULATE_GRAPHS": "0"}, sweep)
    assert len(graphs) == 4 and graphs == eager
