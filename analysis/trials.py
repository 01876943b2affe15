"""Studies, sweep output dirs and per-sample files → tidy polars tables.

`load_trials` gives one row per trial with columns named exactly as the config keys
(docs/architecture.md), the objectives, the trial's record (`recdiff.trial.record.TrialRecord`: interval bounds,
costs, the paths to per-sample data ...; docs/trial_record.md) and the state; `load_samples` gives the long per-sample
table; `load_trace` reads a `.npz` trace.

Trials are read one way, whatever holds them: an Optuna study or a sweep's result.json files each give
:class:`StoredTrial` s (:func:`stored_trials`), and one function makes a row of each (:func:`_row`), reading its
attributes through the record (older names mapped: `recdiff.trial.record.RENAMED`).
"""
from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import polars as pl

from analysis.labels import OBJECTIVES, SAMPLER_KEYS
from recdiff.errors import RecdiffError
from recdiff.params import SAMPLER_PARAMS, parse_sampler, sampler_text
from recdiff.study import STUDY_WIDE, JournalFile, differences, identity_key, replayed, sqlalchemy_url, trial_identity
from recdiff.trial import record
from recdiff.trial.record import TrialRecord, read_attrs

DEFAULT_STORAGE = Path("outputs/optuna/journal.log")
# The trial's record (recdiff/trial/record.py), in its declaration's order. Null where a trial did not record it: a
# LoopSpec readout on another sampler's trial; the paired timing in studies recorded before it (their speed-up is
# unpaired, and the analysis says so instead of dividing tokens/s measured at different times).
RECORD_COLUMNS: tuple[str, ...] = record.columns()
# The study's reference (`run.reference`, one line: "static r=32") and whether the trial's sampler is it; null
# without a recorded config.
REFERENCE_COLUMNS: tuple[str, ...] = ("speed_reference", "is_reference")
TRACE_KEYS: tuple[str, ...] = ("tokens", "frozen", "counter", "delta", "prompt_len", "text_ids", "text")
_URL_SCHEMES = ("sqlite", "postgresql", "postgres", "mysql", "oracle", "mssql")


@dataclass
class StoredTrial:
    """One trial as its storage holds it (an Optuna study or a result.json file): what a row is made of."""

    number: int
    state: str
    params: Mapping[str, Any]
    values: Mapping[str, Any]
    attrs: Mapping[str, Any]              # its user attributes, as stored (any version's names)
    root: Path | None                     # relative paths of the trial are resolved against this dir too
    duration_s: float | None = None
    timed: bool = False                   # its storage records when it ran (a study; result.json does not)


@dataclass
class Resolved:
    """Where trials come from: an Optuna study, or result.json files of a sweep output dir."""

    name: str
    study: optuna.Study | None = None
    results: list[Path] = field(default_factory=list)
    root: Path | None = None  # relative per-trial paths are resolved against this dir too


# ----------------------------------------------------------------------------- storages
def _storage(spec: str, base: Path | None = None) -> tuple[Any, Path | None]:
    """Storage URL, SQLite file or journal file → (storage for optuna, its directory)."""
    if "://" in spec:
        if spec.split(":", 1)[0].split("+")[0] not in _URL_SCHEMES:
            raise RecdiffError(f"unknown storage URL {spec!r} (use sqlite:///, postgresql://, a journal file or a dir)")
        if spec.startswith("sqlite:///"):
            db = Path(spec.removeprefix("sqlite:///"))
            if not db.is_file():  # optuna would silently create an empty database
                raise RecdiffError(f"no SQLite database at {db}")
            return spec, db.parent
        return sqlalchemy_url(spec), None
    path = Path(spec)
    if not path.is_absolute() and base is not None and not path.exists():
        path = base / path
    if not path.is_file():
        raise RecdiffError(f"no study storage at {path}")
    with open(path, "rb") as fh:
        magic = fh.read(16)
    if magic == b"SQLite format 3\x00":
        return f"sqlite:///{path.resolve()}", path.parent
    try:
        backend = JournalFile(str(path))
    except OSError as exc:
        raise RecdiffError(f"cannot read journal {path}: {exc.strerror or exc}") from None
    return replayed(backend, lambda: optuna.storages.JournalStorage(backend)), path.parent


def _open(storage: Any, study_name: str | None, where: str) -> optuna.Study:
    try:
        names = optuna.get_all_study_names(storage)
    except Exception as exc:  # corrupt journal, unreachable server, not a storage at all
        raise RecdiffError(f"cannot read Optuna storage {where}: {type(exc).__name__}: {exc}".splitlines()[0]) from None
    if study_name is None:
        if len(names) != 1:
            listing = ", ".join(names) if names else "none"
            raise RecdiffError(f"{where} holds {len(names)} studies ({listing}); pick one with --study-name")
        study_name = names[0]
    elif study_name not in names:
        raise RecdiffError(f"no study {study_name!r} in {where} (found: {', '.join(names) or 'none'})")
    return optuna.load_study(study_name=study_name, storage=storage)


def resolve(source: Any, study_name: str | None = None) -> Resolved:
    """Study object, storage URL, SQLite/journal file, sweep output dir or study name → Resolved."""
    if isinstance(source, optuna.Study):
        return Resolved(source.study_name, study=source)
    spec = os.fspath(source)
    path = Path(spec)
    if path.name == "study.json" and path.is_file():
        return _resolve_dir(path.parent, study_name)
    if "://" in spec or path.is_file():
        storage, root = _storage(spec)
        study = _open(storage, study_name, spec)
        return Resolved(study.study_name, study=study, root=root)
    if path.is_dir():
        return _resolve_dir(path, study_name)
    if os.sep in spec or path.suffix:
        raise RecdiffError(f"no such study file or directory: {spec}")
    # A bare word names a study in the default storage the sweep writes.
    if not DEFAULT_STORAGE.is_file():
        raise RecdiffError(f"{spec!r} is not a path, and there is no default storage {DEFAULT_STORAGE} "
                           "to look it up in")
    storage, root = _storage(str(DEFAULT_STORAGE))
    study = _open(storage, study_name or spec, str(DEFAULT_STORAGE))
    return Resolved(study.study_name, study=study, root=root)


def _resolve_dir(path: Path, study_name: str | None) -> Resolved:
    meta = path / "study.json"
    if meta.is_file():
        info = json.loads(meta.read_text())
        storage, _ = _storage(str(info["storage"]), base=path)
        study = _open(storage, study_name or info.get("study_name"), str(meta))
        return Resolved(study.study_name, study=study, root=path)
    for candidate in (path / "journal.log", path / "optuna" / "journal.log", *sorted(path.glob("*.db"))):
        if candidate.is_file():
            storage, _ = _storage(str(candidate))
            study = _open(storage, study_name, str(candidate))
            return Resolved(study.study_name, study=study, root=path)
    results = sorted(path.rglob("result.json"))
    if results:
        return Resolved(study_name or path.resolve().name, results=results, root=path)
    raise RecdiffError(f"no study in {path}: expected study.json, an Optuna journal/SQLite file or result.json files")


# ----------------------------------------------------------------------------- trials table
def _resolve_path(value: Any, bases: Iterable[Path | None]) -> str | None:
    """Per-trial paths may be written relative to the sweep dir; return an existing one if any."""
    if value is None:
        return None
    p = Path(value)
    if p.is_absolute():
        return str(p)
    for base in bases:
        if base is not None and (base / p).exists():
            return str((base / p).resolve())
    return str(p)


def _sampler_name(params: Mapping, cfg: Mapping) -> Any:
    if "sampler" in params:
        return params["sampler"]
    sub = cfg.get("sampler")
    if isinstance(sub, Mapping):
        for key in ("name", "sampler", "_name_", "type"):
            if isinstance(sub.get(key), str):
                return sub[key]
    return sub if isinstance(sub, str) else None


def _sub_name(cfg: Mapping, key: str) -> Any:
    sub = cfg.get(key)
    return sub.get("name") if isinstance(sub, Mapping) else sub


def reference_of(config: Mapping) -> tuple[str | None, bool | None]:
    """(the reference the trial was timed against, in its one-line form; whether the trial's sampler is that
    reference). A config recorded before `run.reference` existed was compared with the default, static AR at r=32;
    (None, None) without a recorded config, (reference, None) for a sampler this version cannot read."""
    from recdiff.schema import DEFAULT_REFERENCE

    sampler = config.get("sampler")
    if not isinstance(sampler, Mapping):
        return None, None
    text = (config.get("run") or {}).get("reference") or DEFAULT_REFERENCE
    try:
        ref = sampler_text(parse_sampler(text))
    except RecdiffError:
        return str(text), None
    cls = SAMPLER_PARAMS.get(str(sampler.get("name")))
    if cls is None:
        return ref, None
    known = {f.name for f in cls.declared()}
    try:
        mine = cls(**{k: v for k, v in sampler.items() if k in known})
    except (RecdiffError, TypeError, ValueError):
        return ref, None
    return ref, sampler_text(mine) == ref


def _row(trial: StoredTrial, study: str) -> dict[str, Any]:
    attrs, root, params = read_attrs(trial.attrs), trial.root, trial.params
    cfg = attrs.get("config") or {}
    sampler_cfg = cfg.get("sampler") if isinstance(cfg.get("sampler"), Mapping) else {}
    row: dict[str, Any] = {"study": study, "number": trial.number, "state": trial.state,
                           "sampler": _sampler_name(params, cfg),
                           "benchmark": params.get("benchmark", _sub_name(cfg, "benchmark")),
                           "model": params.get("model", _sub_name(cfg, "model"))}
    # Params win over the config; the config fills keys a trial did not vary (e.g. baselines).
    for key in SAMPLER_KEYS:
        row[key] = params.get(key, sampler_cfg.get(key))
    skip = {"name", "sampler", "_name_", "_target_", "type"}
    for key, value in sampler_cfg.items():
        if key not in row and key not in skip and not isinstance(value, (Mapping, list, tuple)):
            row[key] = value
    for key, value in params.items():
        row.setdefault(key, value)
    for key, value in trial.values.items():
        row[key] = value
    if trial.timed:
        row["duration_s"] = trial.duration_s
    rec = TrialRecord.of(attrs)
    for key in RECORD_COLUMNS:
        row[key] = getattr(rec, key)
    output_dir = rec.output_dir
    bases = [root, Path(output_dir) if output_dir else None, root.parent if root else None, Path.cwd()]
    row["output_dir"] = _resolve_path(output_dir, [root, Path.cwd()])
    row["samples_path"] = _resolve_path(rec.samples_path, bases)
    row["trace_paths"] = [_resolve_path(p, bases) for p in (rec.trace_paths or [])]
    row["fail_reason"] = attrs.get("fail_reason")
    row["baseline"] = bool(attrs.get("baseline", False))   # recorded by study.baselines (recdiff.study.baselines)
    row["speed_reference"], row["is_reference"] = reference_of(cfg)
    identity = trial_identity(attrs)
    row["identity"] = identity_key(identity) if identity is not None else None
    return row


def _column(name: str, values: list[Any]) -> pl.Series:
    """One dtype per column: bool, int, float (ints mixed with floats) or string (anything else)."""
    present = [v for v in values if v is not None]
    if not present:  # keep the contract's dtype for all-null columns so filters still type-check
        return pl.Series(values, dtype=_NULL_DTYPES.get(name, pl.Null))
    if all(isinstance(v, bool) for v in present):
        return pl.Series(values, dtype=pl.Boolean)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        if all(isinstance(v, int) for v in present) and _NULL_DTYPES.get(name) != pl.Float64:
            return pl.Series(values, dtype=pl.Int64)
        return pl.Series([None if v is None else float(v) for v in values], dtype=pl.Float64)
    if all(isinstance(v, (list, tuple)) for v in present):
        return pl.Series([None if v is None else [str(x) for x in v] for v in values], dtype=pl.List(pl.String))
    return pl.Series([None if v is None else str(v) for v in values], dtype=pl.String)


_DTYPES: dict[type, pl.DataType] = {int: pl.Int64(), float: pl.Float64(), bool: pl.Boolean(), str: pl.String(),
                                     list: pl.List(pl.String())}
_NULL_DTYPES: dict[str, pl.DataType] = {
    **dict.fromkeys(("study", "state", "sampler", "benchmark", "model", "beta_schedule", "freeze", "kv_cache",
                     "fail_reason", "identity", "speed_reference"), pl.String()),
    **dict.fromkeys(("r_inner", "wavefront", "headway", "r", "r_draft", "r_draft2", "lookahead", "max_steps"),
                    pl.Int64()),
    **dict.fromkeys(("beta", "eta", "epsilon", "init_scale", "accuracy", "tokens_per_s", "duration_s"), pl.Float64()),
    "continuous_compute": pl.Boolean(), "baseline": pl.Boolean(), "is_reference": pl.Boolean(),
    # the record's columns, typed as it declares them
    **{f.name: _DTYPES[record.python_type(f)] for f in record.fields() if f.name in RECORD_COLUMNS},
}


def _frame(rows: list[dict[str, Any]], objectives: Iterable[str]) -> pl.DataFrame:
    head = ["study", "number", "state", "sampler", "benchmark", "model", *SAMPLER_KEYS]
    tail = [*objectives, *RECORD_COLUMNS, "fail_reason", "baseline", *REFERENCE_COLUMNS, "identity"]
    seen = dict.fromkeys(head)
    for row in rows:
        seen.update(dict.fromkeys(k for k in row if k not in tail))
    order = [*seen, *dict.fromkeys(tail)]
    return pl.DataFrame({k: _column(k, [row.get(k) for row in rows]).alias(k) for k in order}).sort("number")


def _from_study(study: optuna.Study, root: Path | None) -> tuple[list[StoredTrial], list[str]]:
    names = list(study.metric_names or (OBJECTIVES if len(study.directions) == len(OBJECTIVES)
                                        else [f"values_{i}" for i in range(len(study.directions))]))
    trials = []
    for t in study.get_trials(deepcopy=False):
        values = dict(zip(names, t.values)) if t.values is not None else dict.fromkeys(names)
        start, end = t.datetime_start, t.datetime_complete
        trials.append(StoredTrial(t.number, t.state.name, t.params, values, t.user_attrs, root,
                                  (end - start).total_seconds() if start and end else None, timed=True))
    return trials, names


def _from_results(files: list[Path]) -> tuple[list[StoredTrial], list[str]]:
    trials, names = [], dict.fromkeys(OBJECTIVES)
    for i, f in enumerate(files):
        try:
            data = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise RecdiffError(f"unreadable trial result {f}: {exc}") from None
        values = data.get("values") or {}
        names.update(dict.fromkeys(values))
        attrs = dict(data.get("user_attrs") or {})
        attrs.setdefault("output_dir", str(f.parent))
        number = data.get("number", data.get("trial_number"))
        trials.append(StoredTrial(int(number if number is not None else i), str(data.get("state", "COMPLETE")),
                                  data.get("params") or {}, values, attrs, f.parent))
    return trials, list(names)


def stored_trials(res: Resolved) -> tuple[list[StoredTrial], list[str]]:
    """The trials of a resolved source as stored, and the names of its objectives: from its Optuna study, else from
    its result.json files."""
    if res.study is not None:
        return _from_study(res.study, res.root)
    return _from_results(res.results)


def load_trials(source: Any, study_name: str | None = None) -> pl.DataFrame:
    """One row per trial of a study / sweep output dir (a DataFrame is passed through)."""
    if isinstance(source, pl.DataFrame):
        return source
    res = resolve(source, study_name)
    trials, names = stored_trials(res)
    if not trials:
        raise RecdiffError(f"study {res.name!r} has no trials")
    return _frame([_row(t, res.name) for t in trials], names)


def check_identities(df: pl.DataFrame) -> None:
    """Refuse a table whose COMPLETE trials were measured under different identities: within a benchmark any
    difference (another slice, model, max_new_tokens, temperature, device ...), across the benchmarks of a study the
    study-wide keys (the model, the timing, the device: ``recdiff.study.identity.STUDY_WIDE``). Such trials are never
    averaged or put on one Pareto front. The column ``identity`` holds each trial's identity (recdiff.study.identity;
    for a trial recorded before the identity held the device, its ``device`` attribute); a key unknown for a trial is
    not compared."""
    if "identity" not in df.columns or "benchmark" not in df.columns:
        return
    done = df.filter(pl.col("state") == "COMPLETE") if "state" in df.columns else df
    firsts = done.filter(pl.col("identity").is_not_null()).unique(["benchmark", "identity"], keep="first",
                                                                   maintain_order=True).rows(named=True)
    for i, a in enumerate(firsts):
        for b in firsts[i + 1:]:
            diffs = differences(json.loads(a["identity"]), json.loads(b["identity"]))
            same = a["benchmark"] == b["benchmark"]
            diffs = [d for d in diffs if same or d[0].startswith(STUDY_WIDE)]
            if diffs:
                what = "; ".join(f"{k}={x!r} in trial {a['number']}, {y!r} in trial {b['number']}"
                                 for k, x, y in diffs)
                where = f"benchmark {a['benchmark']}" if same else \
                    f"benchmarks {a['benchmark']} and {b['benchmark']}"
                raise RecdiffError(f"study {study_name_of(df)}: {where} hold{'s' if same else ''} trials measured "
                                   f"under different settings ({what}); they are never averaged or put on one Pareto "
                                   "front: analyse them as separate studies")


def study_name_of(df: pl.DataFrame) -> str:
    names = df["study"].drop_nulls().unique().to_list() if "study" in df.columns else []
    return str(names[0]) if len(names) == 1 else "study"


# ----------------------------------------------------------------------------- per-sample data
def load_samples(trials: pl.DataFrame, keys: Iterable[str] | None = None) -> pl.DataFrame:
    """Per-sample parquet files of all trials → one long table, with the trial's config columns."""
    keys = [k for k in (keys or ("study", "number", "state", "sampler", "benchmark", "model", *SAMPLER_KEYS))
            if k in trials.columns]
    frames = []
    for row in trials.select([*keys, "samples_path"]).iter_rows(named=True):
        path = row.pop("samples_path")
        if not path:
            continue
        if not Path(path).is_file():
            warnings.warn(f"per-sample file missing: {path}", stacklevel=2)
            continue
        samples = pl.read_parquet(path)
        samples = samples.drop([c for c in samples.columns if c in row])
        frames.append(pl.DataFrame([row], schema=trials.select(keys).schema).join(samples, how="cross"))
    if not frames:
        return trials.select(keys).clear()
    return pl.concat(frames, how="diagonal_relaxed")


def load_trace(trace: Any) -> dict[str, Any]:
    """`.npz` path, mapping or DiffusionTrace-like object → dict of the trace fields."""
    if isinstance(trace, (str, os.PathLike)):
        path = Path(trace)
        if not path.is_file():
            raise RecdiffError(f"no trace file at {path}")
        with np.load(path, allow_pickle=False) as npz:
            trace = {k: npz[k] for k in npz.files}
    get = trace.get if isinstance(trace, Mapping) else (lambda k: getattr(trace, k, None))
    out = {k: get(k) for k in TRACE_KEYS}
    missing = [k for k in ("tokens", "frozen") if out[k] is None]
    if missing:
        raise RecdiffError(f"trace lacks {', '.join(missing)}")
    out["tokens"] = np.asarray(out["tokens"], dtype=np.int64)
    out["frozen"] = np.asarray(out["frozen"], dtype=np.int64)
    out["prompt_len"] = int(out["prompt_len"]) if out["prompt_len"] is not None else 0
    if out["counter"] is not None:
        out["counter"] = np.asarray(out["counter"])
    if out["delta"] is not None:
        out["delta"] = np.asarray(out["delta"], dtype=np.float32)
    ids, text = out.pop("text_ids"), out.pop("text")
    # token id → its text, when the trial recorded it (recdiff.trace.DiffusionTrace.save); None for older traces
    out["text"] = dict(zip(np.asarray(ids).tolist(), np.asarray(text).tolist())) \
        if ids is not None and text is not None else None
    return out
