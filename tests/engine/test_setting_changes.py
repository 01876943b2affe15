"""One model object decoding one setting after another gives each setting a fresh model's tokens: eagerly, on the
graph path (emulated on a CPU) and compiled, for every sampler and every field of its parameters (recdiff/params.py).

A sweep keeps one model per process, with its compiled programs and captured graphs, across trials: a program or
graph reused for a setting it was not made for is a silent stale replay, or a crash (the wavefront W, once left out of
the graph keys, failed a sweep over W at its second trial). The engine derives every key from the step's constants,
the sampler's typed parameters among them (recdiff/engine/step.py); the walk below changes each field in turn, back
and forth, and compares every decode with a fresh eager model. Its broken twin drops one field from the keys and
shows that the walk catches it.

Huginn's layout is walked on raven_tiny cut to one block in P, two in R and one in C (tests/matrices.py's
``shallow``): the same pieces, steps, keys and specialisations (none depends on the block count), at half the cost of
every decode and of every compiled piece. On it a change decodes other tokens than its base more often than on the
full depth (22 of the 35 changes it takes, at 8 tokens, against 16), so that a stale program or graph shows in more
of the walk.
Ouro is walked for its exit gate: eagerly and on the graph path every sampler it runs; compiled, the changes that
Huginn's layout refuses (``exit_threshold``), since every other change is compiled on Huginn's layout already and its
programs are the family-independent code around the same blocks (tests/families/test_compile.py says the same of
the samplers' pieces). Parcae (a core of its own width, value embeddings read through the cache's tokens) is walked
eagerly and on the graph path.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pytest

from recdiff import generate, load_model
from recdiff.engine import step as engine_step
from recdiff.params import SAMPLER_PARAMS
from recdiff.samplers import check_params
from tests.conftest import RAVEN_TINY, REPO, need_fixtures
from tests.matrices import prompts, quick_compile, shallow

OURO_TINY = REPO / "tests" / "fixtures" / "ouro_tiny" / "mha_tied_t3"
PARCAE_TINY = REPO / "tests" / "fixtures" / "parcae_tiny" / "small140m_like"

# sampler → (base setting, changes): each change is decoded after the base and the base again after it, so that a
# setting meets the programs and graphs of the one before it in both directions. A change that needs another field
# changed with it names both (the last is the field it walks). The samplers in an order whose runners nest: the
# speculative sampler's per-step runner (lookahead's pad, r = 8 planes) holds static's and adaptive's per-step caches
# too, so that they run (compiled: reuse) its programs, and the shared runner is never evicted (KEEP) before the
# diffusion walk needs it again (on a compiled model each new runner compiles its pieces afresh).
WALKS: dict[str, tuple[dict, list[dict]]] = {
    "speculative": ({"r": 8, "r_draft": 2, "lookahead": 3}, [
        {"r": 6}, {"r_draft": 3}, {"lookahead": 2}, {"init_scale": 0.5}, {"kv_cache": "per_step"}]),
    "static": ({"r": 6}, [{"r": 4}, {"init_scale": 0.5}, {"kv_cache": "per_step"}, {"exit_threshold": 0.5}]),
    "adaptive": ({"r": 8, "epsilon": 0.05}, [
        {"r": 12}, {"epsilon": 0.2}, {"init_scale": 0.5}, {"exit_in_prefill": False}, {"kv_cache": "per_step"},
        {"kv_cache": "per_step", "exit_kv": "copy"}, {"exit_threshold": 0.6}]),
    "loopspec": ({"r": 6, "r_draft": 2, "r_draft2": 4}, [
        {"r": 8}, {"r_draft": 3, "r_draft2": None}, {"r_draft2": None}, {"init_scale": 0.5}]),
    "diffusion": ({"r": 8, "r_inner": 2, "epsilon": 0.05, "wavefront": 16, "eta": 0.1}, [
        {"wavefront": 4}, {"headway": 2}, {"r_inner": 4}, {"epsilon": 0.2}, {"eta": 0.3}, {"eta": 0.0},
        {"beta": 0.3}, {"beta": 0.3, "beta_schedule": "constant"}, {"freeze": "fixed"}, {"freeze_rule": "last"},
        {"adaptive_rule": "reference"}, {"init_scale": 0.5}, {"headway": 2, "continuous_compute": True},
        {"r": 12}, {"r_freeze": 4}, {"headway": 3, "pad_id": 0}, {"max_steps": 5}]),
}
# fields whose check admits one value only: nothing to change
ONE_VALUE = {("loopspec", "kv_cache"), ("diffusion", "kv_cache")}
MODELS = (RAVEN_TINY, OURO_TINY)  # Ouro: the exit gate (exit_threshold); Huginn's layout: everything else
# and Parcae, eagerly and on the graph path: a state of the core's own width and value embeddings, whose tokens a
# step reads from the cache (compiled, its programs are the same pieces as Huginn's layout's, keyed the same way)
WALKED = (*MODELS, PARCAE_TINY)
MODES = ("eager", "graphs", "compiled")


@pytest.fixture(scope="session")
def small(tmp_path_factory) -> Path:
    """raven_tiny cut to one block in P, two in R and one in C: the model every walk of Huginn's layout decodes."""
    return shallow(need_fixtures(RAVEN_TINY), tmp_path_factory.mktemp("walks") / RAVEN_TINY.name)


def walked_changes(fixture: Path, mode: str, name: str) -> list[dict]:
    """The changes of ``name``'s walk that ``mode`` decodes on ``fixture``: all of them, but compiled on Ouro only
    those that Huginn's layout refuses (the rest are compiled on Huginn's layout)."""
    base, changes = WALKS[name]
    if mode == "compiled" and fixture == OURO_TINY:
        changes = [c for c in changes if huginn().refuses(check_params(name, {**base, **c}))]
    return changes


@functools.cache
def huginn():
    return load_model(need_fixtures(RAVEN_TINY))


def test_the_walks_change_every_field_of_every_sampler():
    for name, cls in SAMPLER_PARAMS.items():
        base, changes = WALKS[name]
        walked = {k for change in changes for k in change}
        assert walked | {k for s, k in ONE_VALUE if s == name} == {f.name for f in cls.declared()}, name
        for change in changes:
            check_params(name, {**base, **change})  # every setting valid


@pytest.mark.parametrize("mode", MODES)
def test_every_change_is_decoded_in_every_mode_by_a_model_that_takes_it(mode):
    """The walks' models together decode every change of :data:`WALKS` in each mode (a change a model refuses is
    skipped on it: ``exit_threshold`` on Huginn's layout, ``init_scale`` and the diffusion sampler on Ouro's)."""
    models = {d: load_model(need_fixtures(d)) for d in MODELS}
    for name, (base, changes) in WALKS.items():
        for change in changes:
            takers = [d.name for d, m in models.items() if change in walked_changes(d, mode, name)
                      and not m.refuses(check_params(name, {**base, **change}))]
            assert takers, (mode, name, change)


@functools.cache
def fresh(fixture: Path, name: str, setting: tuple, max_new_tokens: int) -> list[list[int]]:
    """The tokens of a fresh eager model (no program or graph made before) for ``setting`` (its items)."""
    ps = prompts(fixture)[:2]
    return [r.tokens for r in generate(load_model(fixture), ps, name, max_new_tokens=max_new_tokens,
                                       stop_token_ids=[], batch_size=len(ps), **dict(setting))]


def settings(name: str, n: int | None = None, changes: list[dict] | None = None) -> list[dict]:
    """A walk's settings in order: each change (the first ``n``; of ``changes`` when given), then the base again."""
    base = WALKS[name][0]
    return [s for change in (WALKS[name][1] if changes is None else changes)[:n] for s in ({**base, **change}, base)]


def walk(model, fixture: Path, samplers=tuple(WALKS), max_new_tokens: int = 8, n: int | None = None,
         mode: str = "eager") -> None:
    """Each sampler's walk on ``model`` (one object throughout), every setting compared with a fresh eager model."""
    ps = prompts(fixture)[:2]
    for name in samplers:
        for setting in settings(name, n, walked_changes(fixture, mode, name)):
            if model.refuses(check_params(name, setting)):
                continue
            got = [r.tokens for r in generate(model, ps, name, max_new_tokens=max_new_tokens, stop_token_ids=[],
                                              batch_size=len(ps), **setting)]
            assert got == fresh(fixture, name, tuple(setting.items()), max_new_tokens), (name, setting)


def walked_model(fixture: Path, request: pytest.FixtureRequest) -> Path:
    """The folder a walk decodes: Huginn's layout on its shallow cut, Ouro's as it is."""
    return request.getfixturevalue("small") if fixture == RAVEN_TINY else need_fixtures(fixture)


@pytest.mark.slow
@pytest.mark.xdist_group("setting-walks")  # one worker: the fresh models' tokens are computed once for both modes
@pytest.mark.parametrize("fixture", WALKED, ids=lambda d: d.name)
@pytest.mark.parametrize("mode", ["eager", "graphs"])
def test_any_run_of_settings_on_one_model_gives_fresh_model_tokens(fixture, mode, request):
    d = walked_model(fixture, request)
    model = load_model(d)
    model.engine_options["emulate_graphs"] = mode == "graphs"
    walk(model, d, mode=mode)


@pytest.mark.slow
@pytest.mark.parametrize("fixture", MODELS, ids=lambda d: d.name)
def test_any_run_of_settings_on_one_compiled_model_gives_fresh_model_tokens(fixture, request):
    d = walked_model(fixture, request)
    model = quick_compile(load_model(d, compile=True))
    walk(model, d, mode="compiled")


@pytest.mark.slow  # beside the walks it answers for (the graph-path walk on the same model passes)
def test_a_field_left_out_of_the_keys_fails_the_walk(monkeypatch, small):
    """The broken twin: ε dropped from every key (as the wavefront once was) replays the diffusion sampler's step
    programs and graphs made for another ε, and the walk fails; with the keys as the engine derives them it passes
    (the test above, on the same model)."""
    fixture = small
    derived = engine_step.const_key

    def without_epsilon(c):
        if dataclasses.is_dataclass(c) and not isinstance(c, type) and hasattr(c, "epsilon"):
            c = dataclasses.replace(c, epsilon=0.03)
        return derived(c)

    walked = settings("diffusion", 4)  # up to ε = 0.2 and back
    assert walked[-2]["epsilon"] == 0.2
    want = {tuple(s.items()): fresh(fixture, "diffusion", tuple(s.items()), 8) for s in walked}  # keys intact
    assert len({tuple(map(tuple, w)) for w in want.values()}) > 1  # ε = 0.2 decodes other tokens: a stale ε shows
    monkeypatch.setattr(engine_step, "const_key", without_epsilon)
    model = load_model(fixture)
    model.engine_options["emulate_graphs"] = True
    with pytest.raises(AssertionError, match="'epsilon': 0.2"):
        walk(model, fixture, samplers=("diffusion",), n=4)
