"""A journal written before the typed plan is still the same study: its configurations hash alike, its identity is
recognised, and a sweep skips (same study) or copies (another study of the storage) what it holds instead of
measuring it again.

``data/journal-b3d7e8b.log`` was written by the code of commit b3d7e8b (before the plan), on the embedded model:

    python sweep.py -m sampler.r_inner=1,2 study.name=old $ARGS              # 5 baselines + 2 grid trials
    python sweep.py study=search study.name=old-search study.search=[r_inner,beta] study.algorithm=random \\
        study.seed=0 study.n_trials=2 $ARGS                                   # 2 searched trials

with ``ARGS`` = :data:`ARGS` plus the storage. Retraining the shipped model changes its identity: write the journal
again then, with the code of the commit before the plan. The journal predates the LoopSpec baseline
(:data:`LATER_BASELINES`), which a sweep on it records.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from optuna.trial import TrialState

from recdiff.study.baselines import BASELINES, baseline_plan
from recdiff.study.identity import config_hash
from tests.sweep_helpers import EMBEDDED, compose_plan, load, run_sweep

JOURNAL = Path(__file__).parent / "data" / "journal-b3d7e8b.log"
ARGS = ["benchmark.limit=2", "run.max_new_tokens=4", "run.speed_samples=1", "run.warmup=0", "run.threads=1",
        "run.progress=false"]
LATER_BASELINES = [("loopspec", {"r": 32})]   # added to BASELINES after the journal was written

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (EMBEDDED / "model.safetensors").exists(), reason="embedded model not shipped")]


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    path = tmp_path / "journal.log"
    shutil.copy(JOURNAL, path)
    return path


def test_the_plan_hashes_every_recorded_configuration_alike(journal):
    grid = load(str(journal), "old").get_trials()
    hashes = {t.user_attrs["config_hash"] for t in grid}
    plans = [compose_plan([*ARGS, f"sampler.r_inner={r}"]) for r in (1, 2)]
    assert len(hashes) == 7
    baselines = {config_hash(baseline_plan(plans[0], s, v)) for s, v in BASELINES if (s, v) not in LATER_BASELINES}
    assert hashes == {config_hash(p) for p in plans} | baselines
    search = load(str(journal), "old-search").get_trials()
    plan = compose_plan([*ARGS, "study=search", "study.search=[r_inner,beta]", "study.algorithm=random",
                         "study.seed=0"])
    assert [config_hash(plan.with_sampler(**t.params)) for t in search] == [t.user_attrs["config_hash"] for t in search]


def test_a_sweep_on_an_old_journal_skips_or_copies_what_it_holds(journal, tmp_path):
    where = [f"study.storage={journal}", f"study.artifact_dir={tmp_path}/art"]
    same = run_sweep(["-m", "sampler.r_inner=1,2", "study.name=old", *ARGS, *where, f"hydra.sweep.dir={tmp_path}/a"])
    out = same.stdout + same.stderr
    assert out.count("skipped: identical configuration") == 2                               # the same identity
    # of the baselines only the one the journal predates is measured
    assert [ln.split("baseline ", 1)[1] for ln in out.splitlines() if "INFO] - baseline " in ln] == ["loopspec_r32"]
    assert len(load(str(journal), "old").get_trials()) == 8
    other = run_sweep(["-m", "sampler.r_inner=1,2", "study.name=new", *ARGS, *where, f"hydra.sweep.dir={tmp_path}/b"])
    assert (other.stdout + other.stderr).count("reused trial") == 8
    copied = load(str(journal), "new").get_trials()
    assert [t.state for t in copied] == [TrialState.COMPLETE] * 8
    assert {t.user_attrs["reused_from"]["study"] for t in copied} == {"old"}
    # copied under today's names (recdiff/trial/record.py): the journal's accuracy_low/high become accuracy_lo/hi
    originals = {t.number: t for t in load(str(journal), "old").get_trials()}
    for t in copied:
        source = originals[t.user_attrs["reused_from"]["trial"]].user_attrs
        assert "accuracy_low" not in t.user_attrs
        lo = source.get("accuracy_low", source.get("accuracy_lo"))
        hi = source.get("accuracy_high", source.get("accuracy_hi"))
        assert (t.user_attrs["accuracy_lo"], t.user_attrs["accuracy_hi"]) == (lo, hi) and lo is not None
    assert not list((tmp_path / "b").rglob("samples.parquet"))                 # nothing was decoded
