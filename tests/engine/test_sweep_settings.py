"""A sweep over the wavefront W (and over headway) keeps one model, with its programs and graphs, across its trials
in one process: with the graph path (emulated on a CPU, ``RECDIFF_EMULATE_GRAPHS=1``) every trial completes and
decodes what a fresh eager model decodes for its settings (a sweep over W once stopped at its second trial on a GPU).

The reference is computed here, in this process, by the trial's own code (the slice's prompts, the shared settings,
the accuracy pass, the per-sample table's decoding) on a fresh eager model per trial, rather than by a second, eager
sweep: the same comparison without a second process's start and timing passes. The sweep's diffusion runs at r = 8
(the default's 32 only costs steps: what the property needs is W and headway changing between trials)."""

from __future__ import annotations

import csv

import pytest

from tests.sweep_helpers import TINY, compose_plan, load, run_sweep

pytestmark = pytest.mark.slow

SETTINGS = [*TINY, "benchmark.limit=2", "run.max_new_tokens=6", "run.speed_samples=1", "sweeps=wavefront",
            "sampler.r=8"]


def swept(tmp_path, env: dict, sweep: list[str]) -> dict[tuple[int, int], list[str]]:
    """Each trial's outputs (samples.csv), by (W, headway); every trial COMPLETE."""
    storage = tmp_path / "journal.log"
    run_sweep(["-m", *SETTINGS, *sweep, f"study.storage={storage}", f"study.artifact_dir={tmp_path / 'artifacts'}",
               f"hydra.sweep.dir={tmp_path / 'sweep'}", "study.name=walk"], timeout=600, env=env)
    out = {}
    for t in load(str(storage), "walk").get_trials():
        assert t.state.name == "COMPLETE", (t.number, t.user_attrs)
        with open(t.user_attrs["output_dir"] + "/samples.csv") as f:
            out[t.params["wavefront"], t.params["headway"]] = [row["output"] for row in csv.DictReader(f)]
    return out


def fresh_eager(wavefront: int, headway: int, out) -> list[str]:
    """The outputs of the trial (W, headway) on a fresh eager model, by the trial's own code."""
    import recdiff
    from recdiff.trial import Workload, prepare
    from recdiff.trial.measure import accuracy_pass, encode_prompts, shared_settings
    from recdiff.trial.samples import record_samples

    plan = compose_plan([*SETTINGS, f"sampler.wavefront={wavefront}", f"sampler.headway={headway}"])
    prepared = prepare(plan.model, plan.benchmark)
    model = recdiff.load_model(prepared.folder)
    assert not model.engine_options.get("emulate_graphs") and not model.engine_options.get("compile")
    work = Workload(model, prepared.device, prepared.benchmark, prepared.problems)
    run, sampler = plan.trial.run, plan.trial.sampler
    base, codec = shared_settings(work, run)
    prompts = encode_prompts(work, run.max_new_tokens, codec)
    batch = accuracy_pass(work, {**base, "sampler": sampler.name, **sampler.params()}, prompts, run,
                          run.batch_size or recdiff.default_batch_size(model.device), 0, lambda n: None)
    out.mkdir(parents=True)
    rows = record_samples(work, prompts.texts, batch.results, [], [], codec, out).rows
    return [row["output"] for row in rows]


def test_a_sweep_over_shape_settings_runs_every_trial_on_the_graph_path(tmp_path):
    # W and headway both change between trials (the window's rows: the state's buffers and the step's shapes)
    graphs = swept(tmp_path / "graphs", {"RECDIFF_EMULATE_GRAPHS": "1"},
                   ["sampler.wavefront=16,4", "sampler.headway=2,1"])
    assert sorted(graphs) == [(4, 1), (4, 2), (16, 1), (16, 2)]
    eager = {(w, h): fresh_eager(w, h, tmp_path / "eager" / f"{w}-{h}") for w, h in graphs}
    assert graphs == eager
