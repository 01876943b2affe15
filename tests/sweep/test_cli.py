"""sweep.py end to end, in subprocesses: the README's main command, failures, a killed worker, configs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from optuna.trial import TrialState

from tests.faults import fault_args
from tests.sweep_helpers import (
    CONF,
    EMBEDDED,
    REPO,
    SHARED,
    TINY,
    compose_cfg,
    load,
    popen_sweep,
    requires_fixture,
    run_sweep,
)

# The README's main command, shrunk to a slice 2 CPU cores run in seconds. On the embedded model when it is
# there; before that on the fixture checkpoint (random weights: r=8 keeps each trial short).
MAIN = ["-m", "sampler.r_inner=1,2,4,8"]
if (EMBEDDED / "model.safetensors").exists():
    SMALL = ["benchmark.limit=2", "run.max_new_tokens=8", "run.threads=1", "study.baselines=false"]
else:
    SMALL = [*TINY, "sampler.r=8"]


def job_args(tmp: Path) -> list[str]:
    return [f"hydra.sweep.dir={tmp}/sweep", f"hydra.run.dir={tmp}/run", f"study.storage={tmp}/journal.log",
            f"study.artifact_dir={tmp}/artifacts"]


@pytest.fixture(scope="module")
def main_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("main")
    proc = run_sweep([*MAIN, *SMALL, *job_args(tmp)], timeout=400)
    info = json.loads((tmp / "sweep" / "study.json").read_text())
    return tmp, info, proc


@pytest.mark.slow
@requires_fixture
def test_main_command_records_four_complete_trials(main_run):
    tmp, info, proc = main_run
    assert info["storage"] == str(tmp / "journal.log")
    study = load(info["storage"], info["study_name"])
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4
    assert study.metric_names == ["accuracy", "tokens_per_s"]
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MAXIMIZE"]
    assert sorted(t.params["r_inner"] for t in trials) == [1, 2, 4, 8]
    for t in trials:
        assert {"sampler", "benchmark", "r", "r_inner", "beta", "eta", "epsilon", "wavefront"} <= set(t.params)
        assert 0.0 <= t.values[0] <= 1.0 and t.values[1] > 0
        assert t.user_attrs["accuracy_lo"] <= t.values[0] <= t.user_attrs["accuracy_hi"]
        assert t.user_attrs["config"]["sampler"]["r_inner"] == t.params["r_inner"]
        assert t.user_attrs["core_passes_per_token"] > 0 and t.user_attrs["peak_memory_bytes"] > 0
        assert {"git_commit", "device", "versions", "output_dir", "samples_path", "trace_paths"} <= set(t.user_attrs)
        out = Path(t.user_attrs["output_dir"])
        result = json.loads((out / "result.json").read_text())
        assert result["state"] == "COMPLETE" and result["values"]["tokens_per_s"] == t.values[1]
        import polars as pl

        rows = pl.read_parquet(t.user_attrs["samples_path"])
        assert rows.columns[:3] == ["problem_id", "prompt", "output"] and rows.height == t.user_attrs["n_samples"]
        assert (rows["new_tokens"] > 0).all()
        assert t.user_attrs["trace_paths"] and Path(t.user_attrs["trace_paths"][0]).exists()
        import optuna

        from recdiff.study import open_storage

        names = sorted(a.filename
                       for a in optuna.artifacts.get_all_artifact_meta(t, storage=open_storage(info["storage"])))
        assert names == ["samples.csv", "stability.png"]
    assert proc.stderr.count("COMPLETE accuracy=") + proc.stdout.count("COMPLETE accuracy=") == 4


@pytest.mark.slow
@requires_fixture
def test_rerun_skips_identical_configurations(main_run):
    tmp, info, _ = main_run
    proc = run_sweep(["-m", "sampler.r_inner=2,8", *SMALL, *job_args(tmp)[1:], f"hydra.sweep.dir={tmp}/again"])
    assert (proc.stdout + proc.stderr).count("skipped: identical configuration") == 2
    assert len(load(info["storage"], info["study_name"]).get_trials()) == 4


@pytest.mark.slow
@requires_fixture
def test_failing_trials_are_fail_and_the_sweep_continues(tmp_path):
    # an error, running out of memory, a hang ended by the timeout, an invalid combination at runtime, and one good
    # trial, in one multirun
    proc = run_sweep(["-m", *fault_args("error", "oom", "hang", "invalid", None), "sampler=static", "sampler.r=2",
                      "run.timeout_s=5", *TINY, *job_args(tmp_path)])
    # an out-of-range setting is a configuration error: exit 2, nothing recorded (not a PRUNED trial per rerun)
    proc2 = run_sweep(["-m", "sampler=static", "sampler.r=0", *TINY, *job_args(tmp_path)[1:],
                       f"hydra.sweep.dir={tmp_path}/s2"], check=False)
    info = json.loads((tmp_path / "sweep" / "study.json").read_text())
    trials = load(info["storage"], info["study_name"]).get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL] * 3 + [TrialState.PRUNED, TrialState.COMPLETE]
    assert [t.user_attrs.get("fail_kind") for t in trials] == ["error", "oom", "timeout", None, None]
    assert trials[0].user_attrs["fail_reason"] == "RuntimeError: injected error"
    assert trials[1].user_attrs["fail_reason"] == "out of memory: injected out-of-memory"
    assert trials[2].user_attrs["fail_reason"].startswith("timeout")
    assert "injected invalid combination" in trials[3].user_attrs["prune_reason"]
    result = json.loads((tmp_path / "sweep" / "2" / "result.json").read_text())
    assert result["state"] == "FAIL" and result["user_attrs"]["fail_kind"] == "timeout"
    assert proc.returncode == 0
    assert proc2.returncode == 2 and (
        proc2.stderr.strip() == "error: static sampler: r=0 must be an integer in [1, 1024]")


@pytest.mark.slow
@requires_fixture
def test_ctrl_c_and_sigterm_fail_the_running_trial_requeue_it_and_exit_130(tmp_path):
    """A local sweep interrupted mid-trial (Ctrl-C, then SIGTERM as SLURM or a shell sends it): exit 130 with one
    line, the trial FAIL (interrupted) and re-queued; the same command again runs the re-queued trial."""
    import os

    args = ["-m", "sampler=static", "sampler.r=2", *TINY, *job_args(tmp_path)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RECDIFF_SHARED": str(SHARED)}
    for n, sig in enumerate((signal.SIGINT, signal.SIGTERM)):
        ready = tmp_path / f"hanging{n}"
        proc = subprocess.Popen([sys.executable, str(REPO / "sweep.py"), *args, *fault_args("hang"),
                                 f"hydra.sweep.dir={tmp_path}/s{n}"], cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, env={**env, "RECDIFF_FAULT_READY": str(ready)})
        try:
            deadline = time.monotonic() + 300
            while not ready.exists():   # the trial hangs mid-trial: claimed, its model loaded
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-2000:]
                time.sleep(0.1)
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
        assert proc.returncode == 130 and err.strip().splitlines() == ["error: interrupted"], err[-2000:]
    run_sweep([*args, f"hydra.sweep.dir={tmp_path}/again"])
    trials = load(str(tmp_path / "journal.log"), json.loads((tmp_path / "again" / "study.json").read_text())[
        "study_name"]).get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.FAIL, TrialState.COMPLETE]
    assert [t.user_attrs.get("fail_kind") for t in trials] == ["interrupted", "interrupted", None]
    # each ran as the re-queued retry (Optuna links a retry to the first attempt and lists the ones between)
    assert [t.system_attrs.get("failed_trial") for t in trials] == [None, 0, 0]
    assert trials[2].system_attrs["retry_history"] == [0, 1]


@pytest.mark.slow
@requires_fixture
def test_killed_worker_leaves_no_running_trial(tmp_path):
    """SIGKILL a searched-study worker mid-trial; the next worker on this machine fails it at once (its process is
    gone), re-queues it, and the study ends with the requested total."""
    args = ["study=search", "study.search=[r]", "sampler=static", "study.space.r.low=1", "study.space.r.high=64",
            "study.algorithm=random", "study.n_trials=2", "study.heartbeat_interval=1", "study.grace_period=600",
            "study.name=killed", *TINY, *job_args(tmp_path)]
    worker = popen_sweep([*args, *fault_args("hang")], log=tmp_path / "w0.log")
    storage = str(tmp_path / "journal.log")
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            if Path(storage).exists():
                try:
                    if load(storage, "killed").get_trials(states=(TrialState.RUNNING,)):
                        break
                except KeyError:
                    pass
            time.sleep(0.5)
        else:
            pytest.fail("the worker never started a trial:\n" + (tmp_path / "w0.log").read_text()[-2000:])
        time.sleep(1.5)   # a heartbeat or two
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    (running,) = load(storage, "killed").get_trials(states=(TrialState.RUNNING,))
    run_sweep([*args, "hydra.run.dir=" + str(tmp_path / "run2")], timeout=240)
    study = load(storage, "killed")
    assert not study.get_trials(states=(TrialState.RUNNING, TrialState.WAITING))
    dead = study.trials[running.number]
    assert dead.state == TrialState.FAIL and dead.user_attrs["fail_kind"] == "worker_died"
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(complete) == 2 and any(t.params == dead.params for t in complete)   # retried


# ------------------------------------------------------------------------------------------------ configs


def config_options() -> list[list[str]]:
    """One override list per config file and structured config: every group option, experiment and sweeps recipe."""
    from recdiff.params import SAMPLER_PARAMS

    cases = [[f"sampler={name}"] for name in SAMPLER_PARAMS]
    for group in ("model", "benchmark", "study", "experiment"):
        for f in sorted((CONF / group).glob("*.yaml")):
            cases.append([f"{group}={f.stem}"])
    # study=tune leaves study.name to the tune command, which derives it from the model, slice, device and batch
    cases[cases.index(["study=tune"])].append("study.name=tune-check")
    for f in sorted((REPO / "sweeps").glob("*.yaml")):
        cases.append([f"sweeps={f.stem}"])
    for f in sorted((CONF / "hydra" / "launcher").glob("*.yaml")):
        cases.append([f"hydra/launcher={f.stem}"])
    return cases


@pytest.mark.parametrize("overrides", config_options(), ids=lambda o: o[0])
def test_every_config_file_composes(overrides):
    from omegaconf import OmegaConf

    from recdiff.schema import make_plan

    cfg = compose_cfg(overrides)
    make_plan(cfg)   # every setting passes the plan's checks
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert resolved["sampler"]["name"] in ("static", "adaptive", "speculative", "diffusion", "loopspec")
    assert resolved["study"]["metric_names"] == ["accuracy", "tokens_per_s"]
    if overrides[0].startswith("sweeps="):
        assert resolved["study"]["name"].startswith(overrides[0].split("=")[1])


@pytest.mark.slow
@pytest.mark.parametrize("args, expect", [
    (["--info"], "Installed Hydra Plugins"),
    (["--info", "defaults", "sampler=static"], "sampler/static"),
    (["--cfg", "job", "sampler.r_inner=8"], "r_inner: 8"),
    (["sampler.r_inner=8", "--cfg", "job", "--package", "sampler"], "r_inner: 8"),
    (["sampler.r_inner=8", "--help"], "Compose your configuration from those groups"),
    (["sweeps=eta", "--cfg", "job", "--package", "study"], "name: eta-"),   # a recipe of sweeps/ (the plugin's path)
    (["-m", "sampler.r_inner=1,2", "--cfg", "job"], "error: Only one of --run, --multirun"),   # Hydra's own rule
])
def test_hydra_flags_work_next_to_overrides(args, expect):
    proc = run_sweep(args, check=False, timeout=120)
    assert expect in proc.stdout + proc.stderr, proc.stdout[-1500:] + proc.stderr[-1500:]
    assert proc.returncode == (2 if expect.startswith("error") else 0)
    assert "Traceback" not in proc.stderr


def test_paper_defaults():
    s = compose_cfg().sampler
    assert (s.name, s.epsilon, s.beta, s.eta, s.r_inner, s.wavefront) == ("diffusion", 0.03, 0.0, 0.1, 4, 128)
    assert compose_cfg().model.name == "embedded" and compose_cfg().benchmark.name == "compose"


@pytest.mark.slow
@pytest.mark.parametrize("override, message", [
    ("sampler.r_innr=4", "error: unknown config key 'sampler.r_innr' (did you mean 'r_inner'?)"),
    ("sampler.r_inner=four", "error: sampler.r_inner: Value 'four' of type 'str' could not be converted to Integer"),
    ("sampler.freeze=sometimes", "error: sampler.freeze: Invalid value 'sometimes'"),
    ("sampler=diffusionn", "error: In 'config': Could not find 'sampler/diffusionn' (available: adaptive, diffusion"),
    ("sweeps=fig_pareto_r_inner_beta",   # a recipe that does not exist; the list shows the recipes of sweeps/
     "error: In 'config': Could not find 'sweeps/fig_pareto_r_inner_beta' (available: beta_schedule, continuous"),
    ("study.n_trial=3", "error: unknown config key 'study.n_trial' (did you mean 'n_trials'?)"),
    ("study.storage=redis://x/0", "error: unknown storage 'redis://x/0'"),
    ("model.path=/nonexistent/model", "error: model path not found: /nonexistent/model"),
    ("benchmark=arith benchmark.limit=x", "error: benchmark.limit='x' must be an integer"),
])
def test_bad_input_is_one_clean_line(tmp_path, override, message):
    proc = run_sweep([*job_args(tmp_path), *override.split()], check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------------- dashboard


def dashboard_executable() -> str:
    """Installed next to the interpreter, which need not be on PATH (`<venv>/bin/python -m pytest`)."""
    beside = Path(sys.executable).with_name("optuna-dashboard")
    return str(beside) if beside.exists() else "optuna-dashboard"


@pytest.mark.slow
def test_dashboard_is_found_without_path(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    proc = subprocess.run([dashboard_executable(), "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip()


@pytest.fixture(scope="module")
def dashboard(main_run):
    import socket
    import subprocess
    import urllib.request

    tmp, info, _ = main_run
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([dashboard_executable(), info["storage"], "--artifact-dir", info["artifact_dir"],
                             "--host", "127.0.0.1", "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(base + "/api/studies", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("optuna-dashboard did not come up")
        yield base, info
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def get_json(url: str):
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


@pytest.mark.slow
@requires_fixture
def test_dashboard_serves_named_objectives_and_artifacts(dashboard):
    import urllib.request

    base, info = dashboard
    (summary,) = [s for s in get_json(base + "/api/studies")["study_summaries"]
                  if s["study_name"] == info["study_name"]]
    assert summary["directions"] == ["maximize", "maximize"]
    detail = get_json(f"{base}/api/studies/{summary['study_id']}")
    assert detail["objective_names"] == ["accuracy", "tokens_per_s"]
    trial = detail["trials"][0]
    arts = {a["filename"]: a for a in trial["artifacts"]}
    assert set(arts) == {"samples.csv", "stability.png"}
    url = f"{base}/artifacts/{summary['study_id']}/{trial['trial_id']}/{arts['stability.png']['artifact_id']}"
    with urllib.request.urlopen(url, timeout=30) as r:
        assert r.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@requires_fixture
def test_dashboard_renders_in_headless_chromium(dashboard, tmp_path):
    import shutil
    import subprocess

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("chromium missing (Debian package `chromium`)")
    base, info = dashboard
    (summary,) = [s for s in get_json(base + "/api/studies")["study_summaries"]
                  if s["study_name"] == info["study_name"]]
    url = f"{base}/dashboard/studies/{summary['study_id']}"
    shots = REPO / "outputs" / "ci"
    shots.mkdir(parents=True, exist_ok=True)
    png = shots / "dashboard_study.png"
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,900",
             "--virtual-time-budget=10000"]
    subprocess.run([*flags, f"--screenshot={png}", url], capture_output=True, timeout=180)
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=180).stdout
    assert info["study_name"] in dom
    from PIL import Image

    img = Image.open(png).convert("L")
    lo, hi = img.getextrema()
    assert img.size == (1280, 900) and hi - lo > 100       # not a blank page
    colors = len(img.resize((256, 180)).getcolors(maxcolors=256 * 180) or [])
    assert colors > 20


@pytest.mark.slow
@requires_fixture
def test_analysis_report_on_the_main_command_study(main_run, tmp_path):
    """issue 7: `python -m analysis report <sweep dir>` on the study the main command produced."""
    tmp, info, _ = main_run
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "analysis", "report", str(tmp / "sweep"), "-o", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    # an r' sweep of the diffusion sampler: the Pareto plot, the r' trade-off, the token-stability pictures
    for stem in ("pareto", "tradeoff_r_inner", "token_stability", "latent_change"):
        assert (out / f"{stem}.png").stat().st_size > 0 and (out / f"{stem}.pdf").stat().st_size > 0, stem
    report = (out / "report.md").read_text()
    assert "![pareto](pareto.png)" in report
    assert (out / "table1.md").is_file() and (out / "trials.parquet").is_file()
    progress = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert progress and progress[0].startswith("[1/")


@pytest.mark.slow
@requires_fixture
def test_the_main_command_ends_with_its_report_and_dashboard_commands(main_run, tmp_path):
    """After its table the main job names the command that draws its figure and writes its report, and the
    dashboard's; the report command, run as printed, writes the figure where it says."""
    import shlex

    tmp, info, proc = main_run
    name = info["study_name"]
    last = proc.stdout.rstrip().splitlines()[-2:]
    report, dashboard = last[0].split(": ", 1), last[1].split(": ", 1)
    assert report[0] == "figure and report" and dashboard[0] == "dashboard", last
    command, writes = report[1].split("   ")
    assert writes == f"(writes outputs/{name}/pareto.png and outputs/{name}/report.md)"
    argv = shlex.split(command)
    assert argv[1:] == ["-m", "analysis", "report", str(tmp / "journal.log"), "--study-name", name]
    assert shlex.split(dashboard[1])[1:] == [str(tmp / "journal.log"), "--artifact-dir", str(tmp / "artifacts")]
    assert Path(shlex.split(dashboard[1])[0]).name == "optuna-dashboard"
    # run from the repository as printed (its interpreter, relative to there), into tmp_path: the figure is drawn
    python = str(REPO / argv[0]) if not Path(argv[0]).is_absolute() and (REPO / argv[0]).exists() else sys.executable
    done = subprocess.run([python, *argv[1:], "-o", str(tmp_path / "report"), "--formats", "png"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "report" / "pareto.png").stat().st_size > 0 and (tmp_path / "report" / "report.md").is_file()


def test_the_next_steps_of_a_study_in_the_default_storage_are_make_targets(tmp_path, monkeypatch):
    """In the default storage (outputs/optuna/journal.log, as `make sweep` writes) the report takes the study's name
    and the dashboard is `make dashboard`."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("sweep_entry", REPO / "sweep.py")   # `sweep` is this package
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    monkeypatch.chdir(tmp_path)
    default = tmp_path / "outputs" / "optuna"
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "study.json").write_text(json.dumps(
        {"storage": str(default / "journal.log"), "study_name": "embedded-compose",
         "artifact_dir": str(default / "artifacts")}))
    report, dashboard = sweep.next_steps(tmp_path / "sweep")
    assert report == ("figure and report: python -m analysis report embedded-compose   "
                      "(writes outputs/embedded-compose/pareto.png and outputs/embedded-compose/report.md)")
    assert dashboard.startswith("dashboard: make dashboard   (") and \
        dashboard.endswith("optuna-dashboard outputs/optuna/journal.log --artifact-dir outputs/optuna/artifacts)")
    # elsewhere: the storage and the study by name, and optuna-dashboard's own command
    (tmp_path / "sweep" / "study.json").write_text(json.dumps(
        {"storage": "postgresql://me:secret@db/recdiff", "study_name": "s", "artifact_dir": str(tmp_path / "art")}))
    report, dashboard = sweep.next_steps(tmp_path / "sweep")
    assert "report 'postgresql://me:***@db/recdiff' --study-name s   (writes outputs/s/pareto.png" in report
    assert dashboard.endswith("optuna-dashboard 'postgresql://me:***@db/recdiff' --artifact-dir art")
    assert "secret" not in report + dashboard


@pytest.mark.slow
@pytest.mark.skipif(not (EMBEDDED / "model.safetensors").exists(), reason="embedded model not shipped")
def test_max_new_tokens_beyond_the_context_is_an_upper_limit(tmp_path):
    """The default run.max_new_tokens (256) exceeds the embedded model's room after a prompt: still COMPLETE."""
    run_sweep(["sampler=static", "sampler.r=2", "benchmark.limit=1", "run.max_new_tokens=100000", "run.warmup=0",
               "run.threads=1", "run.progress=false", "study.baselines=false", *job_args(tmp_path)])
    storage = str(tmp_path / "journal.log")
    import optuna

    from recdiff.study import open_storage

    names = optuna.get_all_study_names(storage=open_storage(storage))
    trials = load(storage, names[0]).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE], [t.user_attrs.get("prune_reason") for t in trials]
