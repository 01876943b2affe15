"""What a trial measures, apart from the sampler: its identity. Trials of different identities are never averaged.

The identity is the benchmark with its slice (every option but ``workers``, which only sets how fast code is scored;
for an lm-eval task also the task's version),
the model (path or hub id, a digest of its weights, the dtype it runs in, its tokenizer), the generation settings
``run.max_new_tokens``, ``run.temperature`` and ``run.top_p``, and how speed is timed where it differs from the
default (``run.reference``: every speed-up of a study is against it; ``run.timing_threads``; ``run.timing_batch``),
and the device the trial ran on: its kind and name (``recdiff/device.py``: a CPU's model name, a GPU's name).
Every trial records it (user attribute ``identity``).

A study holds one identity per benchmark, and one model and one temperature/top-p over all its benchmarks (Table 1
spans four benchmarks in one study). A sweep whose identity differs is refused before the model loads, with one line
naming the differing keys: pick another ``study.name``. The same weights under another path count as the same model.
Trials recorded before identities existed are judged by their recorded config (weights unknown); trials recorded
before the identity held the device, by their ``device`` attribute (a CPU's name unknown there). A part unknown on
either side is never a conflict.

Within an identity, a trial's configuration is its ``config_hash`` (:func:`config_hash`): trials of the same hash are
duplicates, skipped in a study and copied between the studies of a storage.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import optuna

from recdiff.device import parse_label
from recdiff.digest import file_sha256, weights_digest  # noqa: F401  (re-exported: the identity's weights digest)
from recdiff.errors import RecdiffError

if TYPE_CHECKING:
    from recdiff.schema import Config

BENCHMARK_OPERATIONAL = ("workers",)                       # how fast a benchmark is scored, not what it scores
RUN_KEYS = ("max_new_tokens", "temperature", "top_p")
# the same over all benchmarks of a study
STUDY_WIDE = ("model.", "run.temperature", "run.top_p", "run.reference", "run.timing_threads", "run.timing_batch",
              "device.")
# Keys of the config that do not change what a trial measures (left out of the configuration's hash). run.repeats
# only narrows the timing's intervals: a COMPLETE configuration is not measured again for it. run.reference,
# run.timing_threads and run.timing_batch are part of the identity instead (timing_identity). sampler.preset is where
# a tuned preset came from (recdiff/presets.py), not a setting.
VOLATILE_KEYS = ("study", "worker", "run.progress", "run.repeats", "run.reference", "run.timing_threads",
                 "run.timing_batch", "sampler.preset")
# Keys hashed at these values though the config no longer has them, so that trials recorded before they left still
# match their configuration: run.inject_fault, a test hook that left the schema (tests/faults.py).
HASHED_AS_BEFORE = {"run": {"inject_fault": None}}
# Keys hashed only when set: added after trials were recorded, they are left out at their default so that those trials
# keep their hash. model.family: a checkpoint's family is recognised unless named; sampler.exit_threshold and
# sampler.exit_kv: an exit gate's rule (Ouro), absent from models without a gate.
HASHED_WHEN_SET = {"model": {"family": None}, "sampler": {"exit_threshold": None, "exit_kv": "mask"}}


def config_hash(plan: Config) -> str:
    """What makes two trials identical: the resolved config without study/bookkeeping keys."""
    d = plan.as_dict()
    for node, keys in HASHED_AS_BEFORE.items():
        d[node] = {**keys, **d[node]}
    for node, keys in HASHED_WHEN_SET.items():
        for k, default in keys.items():
            if d.get(node, {}).get(k, default) == default:
                d.get(node, {}).pop(k, None)
    for k in VOLATILE_KEYS:
        node, *rest = k.split(".")
        if rest:
            d.get(node, {}).pop(rest[0], None)
        else:
            d.pop(node, None)
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def identity_from_config(config: Mapping[str, Any], weights: str | None = None, dtype: str | None = None,
                         benchmark: Mapping[str, Any] | None = None,
                         device: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The identity of a resolved config (``user_attrs["config"]`` of a trial). Unknown parts are left out.
    ``benchmark``: facts of the benchmark its options do not state (``Benchmark.identity()``: an lm-eval task's
    version); ``device``: the device's kind and name (``recdiff.device.Device.identity``)."""
    bench = {k: v for k, v in (config.get("benchmark") or {}).items() if k not in BENCHMARK_OPERATIONAL}
    bench.update(benchmark or {})
    m = config.get("model") or {}
    model = {"path": m.get("path")}
    if weights is not None:
        model["weights"] = weights
    if (dtype or m.get("dtype")) is not None:
        model["dtype"] = dtype or m.get("dtype")
    if "tokenizer" in m:
        model["tokenizer"] = m["tokenizer"]
    if m.get("compile"):  # compiled decoding runs at another speed: its trials are not eager ones
        model["compile"] = True
    if m.get("family"):  # named, not recognised: the weights are run as that family's model
        model["family"] = m["family"]
    run = {k: v for k, v in (config.get("run") or {}).items() if k in RUN_KEYS}
    run.update(timing_identity(config.get("run") or {}))
    out: dict[str, Any] = {"benchmark": bench, "model": model, "run": run}
    if device:
        out["device"] = dict(device)
    return out


def timing_identity(run: Mapping[str, Any]) -> dict[str, Any]:
    """How a trial's speed was timed, where it differs from the default: the reference (in its one-line form, so
    ``static r=32 init_scale=0`` is ``static r=32``), the threads and the sequences per timed call. Left out at the
    defaults, so that studies recorded before paired timing keep their identity."""
    from recdiff.params import parse_sampler, sampler_text
    from recdiff.schema import DEFAULT_TIMING_THREADS

    out: dict[str, Any] = {}
    if run.get("reference") is not None:
        try:
            ref = sampler_text(parse_sampler(run["reference"]))
        except RecdiffError:   # recorded by another version: compared as written
            ref = str(run["reference"])
        if ref != defaulted()["run.reference"]:
            out["reference"] = ref
    if run.get("timing_threads", DEFAULT_TIMING_THREADS) != DEFAULT_TIMING_THREADS:
        out["timing_threads"] = run["timing_threads"]
    if run.get("timing_batch", 1) != 1:
        out["timing_batch"] = run["timing_batch"]
    return out


def trial_identity(user_attrs: Mapping[str, Any]) -> dict[str, Any] | None:
    """A recorded trial's identity; derived from its config for trials recorded before identities existed, with the
    device of its ``device`` attribute where the identity does not hold one (recorded before it did)."""
    if isinstance(user_attrs.get("identity"), Mapping):
        identity = dict(user_attrs["identity"])
    elif isinstance(user_attrs.get("config"), Mapping):
        identity = identity_from_config(user_attrs["config"])
    else:
        return None
    if "device" not in identity and (device := parse_label(user_attrs.get("device"))) is not None:
        identity["device"] = device.identity()
    return identity


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


@functools.cache
def defaulted() -> dict[str, Any]:
    """Keys an identity holds only where they differ from their default: missing, they are at the default."""
    from recdiff.params import parse_sampler, sampler_text
    from recdiff.schema import DEFAULT_REFERENCE, DEFAULT_TIMING_THREADS

    return {"model.compile": False, "run.reference": sampler_text(parse_sampler(DEFAULT_REFERENCE)),
            "run.timing_threads": DEFAULT_TIMING_THREADS, "run.timing_batch": 1}


def differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(dotted key, value in a, value in b) for each key known on both sides whose values differ (a key of
    :func:`defaulted` missing on one side is at its default there)."""
    fa, fb = flatten(a), flatten(b)
    for k, v in defaulted().items():
        if (k in fa) != (k in fb):
            fa.setdefault(k, v)
            fb.setdefault(k, v)
    same_weights = "model.weights" in fa and fa.get("model.weights") == fb.get("model.weights")
    return [(k, fa[k], fb[k]) for k in sorted(fa.keys() & fb.keys())
            if fa[k] != fb[k] and not (k == "model.path" and same_weights)]


def key(identity: Mapping[str, Any]) -> str:
    """A stable text for grouping: JSON with sorted keys, the path left out when the weights are known."""
    flat = flatten(identity)
    if "model.weights" in flat:
        flat.pop("model.path", None)
    return json.dumps(flat, sort_keys=True, default=str)


def conflict(theirs: Mapping[str, Any], ours: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """The differences that keep two identities out of one study (all of them within one benchmark)."""
    same_benchmark = _benchmark(theirs) == _benchmark(ours)
    return [d for d in differences(theirs, ours) if same_benchmark or d[0].startswith(STUDY_WIDE)]


def _benchmark(identity: Mapping[str, Any]) -> tuple[Any, Any]:
    """Which benchmark an identity measures: its name, and for ``lm_eval`` the task."""
    b = identity.get("benchmark") or {}
    return b.get("name"), b.get("task")


def check_identity(study: optuna.Study, identity: Mapping[str, Any]) -> None:
    """Refuse, in one line naming the differing keys, a run measured otherwise than the study's trials."""
    seen: set[str] = set()
    for t in study.get_trials(deepcopy=False):
        theirs = trial_identity(t.user_attrs)
        if theirs is None or key(theirs) in seen:
            continue
        seen.add(key(theirs))
        diffs = conflict(theirs, identity)
        if diffs:
            what = "; ".join(f"{k}={b!r} here, {a!r} there" for k, a, b in diffs)
            raise RecdiffError(f"study {study.study_name!r} holds trials measured otherwise (trial {t.number}): "
                               f"{what}. Trials measured differently never share a study: set another study.name, "
                               "or the study's settings")
