"""The paper runner behind ``python -m analysis paper`` (the command stays there, analysis/README.md): every recipe
in ``sweeps/`` on the embedded default, each run as sweeps/README.md says to run it (``python sweep.py -m
sweeps=<recipe> model=embedded benchmark=compose``) in a subprocess, at the scale's slice, into one Optuna journal
under the output folder, one study per recipe (``paper_<scale>-<recipe>``); then the analysis of what they recorded
(:mod:`analysis.paper`: every figure and table, and a ``report.md`` that states each figure's claim from the paper and
whether the run agrees).

The studies share every configuration they have in common (the baselines, the sampler's defaults, a grid point two
recipes both sweep) through the study identity (``study.reuse``): it is measured once and copied into the other
studies. Running the command again completes what is missing and redraws everything. The output folder's layout is
:mod:`analysis.paper`'s docstring.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from analysis.paper import analyse
from recdiff.errors import RecdiffError

REPO = Path(__file__).resolve().parents[2]
SWEEPS = REPO / "sweeps"
# Recipes in the order they run: the big grid first (its points are reused by the one-parameter recipes).
ORDER = ("pareto_r_inner_beta", "tradeoff_r_inner", "tradeoff_epsilon", "eta", "beta_schedule", "wavefront",
         "headway", "init_scale", "continuous_compute", "kv_sharing", "table1", "loopspec", "search_nsga2")
EMBEDDED = ("model=embedded", "benchmark=compose")


@dataclass(frozen=True)
class Scale:
    """How big a run is: the benchmark slice, the problems timed for tokens/s and the rounds of their paired timing
    (``run.repeats``), how many values of each swept parameter are kept (None: all, as the recipe lists them) and the
    size of the NSGA-II search."""
    limit: int
    speed_samples: int
    repeats: int
    warmup: int           # run.warmup: untimed calls before each pass (the smoke's timings are never judged)
    max_values: int | None
    search_trials: int
    population: int
    minutes: int          # the budget it is sized for, on 2 CPU cores (printed, not enforced)
    # run.timeout_s of every trial: a search may propose a configuration whose wavefront never converges (high η
    # and noise, r' = 1), which runs to the step cap (4·max_new_tokens·⌈r/r'⌉ steps per answer): hours, not seconds.
    # It is recorded FAIL and the run goes on; the limit sits well above an ordinary trial (docs/speed.md, "Sizing
    # the paper runner").
    trial_timeout_s: int


SCALES: dict[str, Scale] = {
    "smoke": Scale(limit=2, speed_samples=1, repeats=2, warmup=0, max_values=2, search_trials=2, population=2,  # tests
                   minutes=5, trial_timeout_s=120),
    # ci: speed_samples × repeats paired cells per trial for the speed-up's interval (the report states how wide), in
    # ≤ 15 minutes on 2 CPU cores (docs/speed.md, "Sizing the paper runner"); accuracy on the embedded default sits
    # at its ceiling whatever the slice, so the slice is what gives way
    "ci": Scale(limit=24, speed_samples=2, repeats=3, warmup=1, max_values=3, search_trials=6, population=3,
                minutes=15, trial_timeout_s=300),
    "full": Scale(limit=200, speed_samples=16, repeats=5, warmup=1, max_values=None, search_trials=32, population=8,
                  minutes=60, trial_timeout_s=600),
}


@dataclass
class Recipe:
    name: str
    params: dict[str, list[str]]   # hydra.sweeper.params, values as written
    search: bool                   # an ask/tell recipe (study.mode=search; no -m)
    comment: str                   # the recipe's first comment line: what of the paper it draws
    sampler: str = "diffusion"     # the sampler it pins, whose defaults a thinned sweep keeps

    @classmethod
    def load(cls, path: Path) -> "Recipe":
        """The recipe as ``sweep.py`` composes it (Hydra's compose API over conf/, with sweeps/ on the search path
        through ``hydra_plugins/recdiff_recipes.py``), so that what the runner sweeps is what a user's
        ``python sweep.py -m sweeps=<name>`` sweeps."""
        from hydra import compose, initialize_config_dir
        from omegaconf import OmegaConf

        import recdiff.schema  # noqa: F401  (registers the structured-config schemas conf/config.yaml names)

        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            cfg = compose("config", overrides=[f"sweeps={path.stem}"], return_hydra_config=True)
        params = OmegaConf.to_container(cfg.hydra.sweeper.params) if cfg.hydra.sweeper.get("params") else {}
        # a comment is not configuration: the first comment line of the file says what of the paper it draws
        first = next((ln.lstrip("# ").strip() for ln in path.read_text().splitlines()
                      if ln.startswith("#") and "@package" not in ln), "")
        return cls(path.stem, {k: [v.strip() for v in str(vals).split(",")] for k, vals in params.items()},
                   cfg.study.mode == "search", first, str(cfg.sampler.name))


def recipes(only: Sequence[str] | None = None) -> list[Recipe]:
    found = {p.stem: p for p in SWEEPS.glob("*.yaml")}
    if only:
        unknown = [n for n in only if n not in found]
        if unknown:
            raise RecdiffError(f"unknown recipe(s) {', '.join(unknown)} (sweeps/: {', '.join(sorted(found))})")
    names = [n for n in ORDER if n in found] + sorted(set(found) - set(ORDER))
    return [Recipe.load(found[n]) for n in names if not only or n in only]


def _default(key: str, sampler: str = "diffusion") -> str | None:
    """The sampler's default for a swept `sampler.<key>` (kept when a scale thins the values)."""
    from recdiff.schema import SAMPLER_PARAMS

    if not key.startswith("sampler."):
        return None
    v = getattr(SAMPLER_PARAMS[sampler](), key.split(".", 1)[1], None)
    return None if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def thin(values: list[str], k: int | None, keep: str | None = None) -> list[str]:
    """At most `k` (≥ 2) of `values`: both ends, `keep` (the sampler's default) if listed, then repeatedly the value
    farthest (in list position) from those chosen, so a thinned sweep still spans its range."""
    if k is None or len(values) <= k:
        return list(values)
    chosen = {0, len(values) - 1}
    at = next((i for i, v in enumerate(values) if keep is not None and _same(v, keep)), None)
    if at is not None and len(chosen) < k:
        chosen.add(at)
    while len(chosen) < k:
        rest = [i for i in range(len(values)) if i not in chosen]
        chosen.add(max(rest, key=lambda i: (min(abs(i - j) for j in chosen), -i)))
    return [values[i] for i in sorted(chosen)]


def _same(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return a.lower() == b.lower()


def sweep_command(recipe: Recipe, scale: Scale, scale_name: str, out: Path,
                  overrides: Sequence[str] = ()) -> list[str]:
    """The `sweep.py` command line that runs `recipe` at `scale` into `out`; `overrides` (Hydra `key=value`) last."""
    study = f"paper_{scale_name}-{recipe.name}"
    args = [sys.executable, str(REPO / "sweep.py")]
    if not recipe.search:
        args.append("-m")
    args += [f"sweeps={recipe.name}", *EMBEDDED, f"benchmark.limit={scale.limit}",
             f"run.speed_samples={scale.speed_samples}", f"run.repeats={scale.repeats}", f"run.warmup={scale.warmup}",
             f"run.timeout_s={scale.trial_timeout_s}", "run.progress=false",
             f"study.name={study}", f"study.storage={out / 'optuna' / 'journal.log'}",
             f"study.artifact_dir={out / 'optuna' / 'artifacts'}"]
    if recipe.search:
        args += [f"study.n_trials={scale.search_trials}", f"study.population_size={scale.population}",
                 f"hydra.run.dir={out / 'runs' / recipe.name}"]
    else:
        args.append(f"hydra.sweep.dir={out / 'runs' / recipe.name}")
        for key, values in recipe.params.items():
            if key == "benchmark":   # table1's four benchmarks: the embedded default has one
                continue
            # only the sampler's values are thinned: Table 1's rows stay
            kept = thin(values, scale.max_values, _default(key, recipe.sampler)) if key.startswith("sampler.") \
                else values
            args.append(f"{key}={','.join(kept)}")
    return args + list(overrides)


def study_name(recipe: str, scale_name: str) -> str:
    return f"paper_{scale_name}-{recipe}"


def run_recipe(recipe: Recipe, scale: Scale, scale_name: str, out: Path, say: Callable[[str], None],
               overrides: Sequence[str] = ()) -> dict:
    """Run one recipe's sweep, its console output into logs/<recipe>.log; echo one line per trial. What became of
    its configurations (measured, reused, already in the study, failed) is read from the sweep's own summary
    (``runs/<recipe>/sweep.json``, :mod:`recdiff.study.sweep_status`), counted from its jobs' result files."""
    from recdiff.study import sweep_status

    cmd = sweep_command(recipe, scale, scale_name, out, overrides)
    log = out / "logs" / f"{recipe.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    summary_file = out / "runs" / recipe.name / sweep_status.SUMMARY_FILE
    summary_file.unlink(missing_ok=True)   # a summary left by an earlier run is not this run's
    start = time.monotonic()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("w") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        assert proc.stdout is not None
        for line in proc.stdout:  # echoed for the reader; nothing is counted from it
            fh.write(line)
            fh.flush()
            text = line.rstrip()
            if "] - trial " in text and any(f" {s} " in text for s in ("COMPLETE", "FAIL", "PRUNED")):
                say("    " + text.split("] - ", 1)[-1][:150])
            if text.startswith("error:"):
                say("    " + text)
        rc = proc.wait()
    try:
        counts = json.loads(summary_file.read_text())["counts"]
    except (OSError, ValueError, KeyError):   # the sweep ended before its summary (a bad config, a kill)
        counts = {}
        say(f"    no sweep summary at {summary_file}: nothing counted")
    counts = {k: int(counts.get(k, 0)) for k in sweep_status.KINDS}
    return {"recipe": recipe.name, "study": study_name(recipe.name, scale_name), "returncode": rc,
            "seconds": round(time.monotonic() - start, 1), "measured": counts["measured"], "reused": counts["reused"],
            "already_in_study": counts["already_in_study"], "failed": counts["failed"], "pruned": counts["pruned"],
            "command": cmd, "log": str(log)}


def run_paper(out: str | Path = "outputs/paper", scale: str = "ci", only: Sequence[str] | None = None,
              overrides: Sequence[str] = (), say: Callable[[str], None] = print) -> int:
    """Run the recipes, then draw everything and judge every claim (:func:`analysis.paper.analyse`). 0 when every
    recipe ran; 1 when one failed (its claims are n/a, everything else is still written). `overrides` go to every
    sweep (e.g. ``run.threads=1``); one that changes what a trial measures (``model.compile=true``) makes the studies
    refuse an earlier run's trials: use another `out`."""
    if scale not in SCALES:
        raise RecdiffError(f"unknown scale {scale!r} (choose from {', '.join(SCALES)})")
    sc = SCALES[scale]
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    todo = recipes(only)
    say(f"paper --scale {scale}: {len(todo)} recipes on the embedded default, {sc.limit} problems per trial, "
        f"into {out} (sized for ≤ {sc.minutes} min on 2 CPU cores)")
    start = time.monotonic()
    runs = []
    for i, recipe in enumerate(todo, 1):
        say(f"[{i}/{len(todo)}] {recipe.name}: {recipe.comment}")
        run = run_recipe(recipe, sc, scale, out, say, overrides)
        runs.append(run)
        say(f"[{i}/{len(todo)}] {recipe.name}: {run['measured']} measured, {run['reused']} reused, "
            f"{run['already_in_study']} already in the study, {run['failed']} failed in {run['seconds']:.0f}s"
            + ("" if run["returncode"] == 0 else f" — exit {run['returncode']}, see {run['log']}"))
    analyse(out, scale, asdict(sc), EMBEDDED, runs, overrides, start, say)
    failed = [r["recipe"] for r in runs if r["returncode"] != 0]
    if failed:
        say(f"error: recipe(s) failed: {', '.join(failed)} (their logs are in {out / 'logs'})")
        return 1
    return 0
