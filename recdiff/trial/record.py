"""What a measured trial records: one declaration of its attributes, with each one's unit and meaning.

:class:`TrialRecord` is the one place a trial's measured statistics are named: :func:`recdiff.trial.measure.run_trial`
builds one and stores :meth:`TrialRecord.attrs` as the trial's Optuna user attributes (and in its ``result.json``);
:func:`read_attrs` and :meth:`TrialRecord.of` read stored attributes back, of any version (:data:`RENAMED` maps names
that older journals hold), for ``analysis.trials`` and the tune; ``docs/trial_record.md`` is generated from it
(``python -m recdiff.tools.record_docs``; a test fails when the two drift). A new statistic is one field here plus
the line of ``measure`` that computes it.

Why a frozen dataclass (not a polars or pyarrow schema): it imports nothing heavy (the study's recording path and the
analysis read it without torch or polars), its values are plain Python numbers, strings and lists, which is what
Optuna's user attributes and JSON hold, and :func:`dataclasses.fields` carries each field's unit and meaning as
metadata, from which the analysis derives its column types and the docs their table. Frozen: a record is what was
measured, not a place to accumulate more.

The attributes that describe where and how a trial ran rather than what it measured (``config``, ``config_hash``,
``identity``, ``git_commit``, ``device``, ``versions``, ``thread_budget``, the failure and claim attributes) are written
by the study (:mod:`recdiff.study.record`, :mod:`recdiff.trial.provenance`) and described in docs/architecture.md.

Intervals are named one way: ``<statistic>_lo`` and ``<statistic>_hi`` (95%).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, List, Optional

# Names that journals written before this declaration hold → their names now.
RENAMED: dict[str, str] = {"accuracy_low": "accuracy_lo", "accuracy_high": "accuracy_hi"}


def stat(unit: str, meaning: str, *, sampler: str | None = None, column: bool = True) -> Any:
    """A field of the record: its ``unit`` and ``meaning``; ``sampler``: recorded by that sampler's trials only;
    ``column``: a column of the analysis's trials table (``analysis.trials.load_trials``)."""
    return field(default=None, metadata={"unit": unit, "meaning": meaning, "sampler": sampler, "column": column})


@dataclass(frozen=True)
class TrialRecord:
    """A measured trial's statistics (its objectives, ``accuracy`` and ``tokens_per_s``, are the trial's values).
    Every field is optional: a trial recorded by older code lacks the later ones."""

    # accuracy over the slice
    accuracy_lo: Optional[float] = stat("fraction", "lower bound of accuracy's 95% Wilson score interval")
    accuracy_hi: Optional[float] = stat("fraction", "upper bound of accuracy's 95% Wilson score interval")
    n_samples: Optional[int] = stat("problems", "problems of the slice decoded for accuracy")
    n_correct: Optional[int] = stat("problems", "problems answered correctly")
    # speed: the paired timing (recdiff.timing.paired_timing), the trial's sampler and the study's reference
    # (run.reference) timed alternately on the same prompts in run.repeats rounds
    tokens_per_s_lo: Optional[float] = stat("tokens/s", "lower bound of the objective tokens_per_s's 95% "
                                            "percentile-bootstrap interval (median over prompts × rounds)")
    tokens_per_s_hi: Optional[float] = stat("tokens/s", "upper bound of that interval")
    speedup: Optional[float] = stat("×", "median over prompts × rounds of the trial's rate ÷ the reference's in the "
                                    "same pair (1 for the reference's own trial)")
    speedup_lo: Optional[float] = stat("×", "lower bound of the speed-up's 95% bootstrap interval")
    speedup_hi: Optional[float] = stat("×", "upper bound of the speed-up's 95% bootstrap interval")
    speedup_cells: Optional[List[List[float]]] = stat(
        "×", "the paired ratios per timed call and round (a list per call): what an interval by problem resamples",
        column=False)
    reference_tokens_per_s: Optional[float] = stat("tokens/s", "the reference's tokens/s in the same rounds")
    timing_rounds: Optional[int] = stat("rounds", "rounds of paired timing (run.repeats)")
    threads: Optional[int] = stat("threads", "torch threads while timing (run.timing_threads; not thread_budget)")
    speed_samples: Optional[int] = stat("calls", "timed calls per round: problems timed alone, or with timing_batch "
                                        "> 1 the batches timed")
    timing_batch: Optional[int] = stat("sequences", "sequences per timed call (run.timing_batch)")
    time_per_sample_s: Optional[float] = stat("s", "seconds of the sampler's timed call per problem: "
                                            "median over rounds, mean over the calls, ÷ timing_batch")
    throughput_tokens_per_s: Optional[float] = stat("tokens/s", "generated tokens per wall-clock second of the "
                                                    "accuracy pass, batch_size sequences side by side")
    batch_size: Optional[int] = stat("sequences", "sequences decoded side by side in the accuracy pass")
    compiled: Optional[bool] = stat("", "the model ran compiled (torch.compile)")
    # cost
    mean_new_tokens: Optional[float] = stat("tokens", "generated tokens per problem, mean over the slice")
    core_passes_per_token: Optional[float] = stat("passes/token", "recurrent-core passes per generated token, "
                                                  "summed over the slice then divided")
    peak_memory_bytes: Optional[int] = stat("bytes", "peak memory while measuring: allocated on a GPU, the process's "
                                            "resident set on a CPU")
    kv_cache_bytes: Optional[int] = stat("bytes", "K/V cache bytes one sequence's call asked for, the most over the "
                                         "slice")
    kv_bytes_per_token: Optional[float] = stat("bytes/token", "K/V cache bytes a sequence's call asked for per token "
                                               "of the sequence (prompt + generated), the most over the slice")
    # files
    output_dir: Optional[str] = stat("path", "the trial's folder")
    samples_path: Optional[str] = stat("path", "the per-sample table (parquet)")
    trace_paths: Optional[List[str]] = stat("paths", "the diffusion traces saved (.npz)")
    # a LoopSpec trial's readouts (recdiff/trial/readouts.py), pooled over the slice, never a mean of ratios
    q1_acceptance: Optional[float] = stat("fraction", "proposals of the first early readout the full-depth readout "
                                          "committed ÷ those verified (null: none verified)", sampler="loopspec")
    q2_acceptance: Optional[float] = stat("fraction", "the same for the second early readout", sampler="loopspec")
    sequential_per_token: Optional[float] = stat("recurrences/token", "recurrences a token waited for after the "
                                                 "first, over the slice's tokens", sampler="loopspec")
    peak_lanes: Optional[int] = stat("lanes", "the most lanes one sequence held", sampler="loopspec")

    def attrs(self, sampler: str) -> dict[str, Any]:
        """The user attributes a trial of ``sampler`` stores: every field, but another sampler's own ones."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.metadata["sampler"] in (None, sampler)}

    @classmethod
    def of(cls, attrs: Mapping[str, Any]) -> TrialRecord:
        """The record in a trial's stored user attributes (of any version; what it lacks is None)."""
        known = read_attrs(attrs)
        return cls(**{f.name: known.get(f.name) for f in dataclasses.fields(cls)})


def read_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's stored user attributes under today's names (:data:`RENAMED`); the others as they are."""
    out = {RENAMED.get(k, k): v for k, v in attrs.items() if k not in RENAMED.values()}
    out.update({k: v for k, v in attrs.items() if k in RENAMED.values()})   # today's name wins over an old one
    return out


def fields() -> tuple[dataclasses.Field, ...]:
    """The record's fields, in declaration order."""
    return dataclasses.fields(TrialRecord)


def columns() -> tuple[str, ...]:
    """The record's fields that are columns of the analysis's trials table."""
    return tuple(f.name for f in fields() if f.metadata["column"])


def python_type(f: dataclasses.Field) -> type:
    """A field's type without its Optional: int, float, bool, str or list."""
    hint = typing.get_type_hints(TrialRecord)[f.name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    inner = args[0] if args else hint
    return typing.get_origin(inner) or inner


def markdown_table() -> str:
    """The table of docs/trial_record.md: each field, its type, unit and meaning."""
    names = {int: "int", float: "float", bool: "bool", str: "str", list: "list"}
    lines = ["| attribute | type | unit | meaning |", "|:---|:---|:---|:---|"]
    for f in fields():
        meaning = f.metadata["meaning"] + (f" ({f.metadata['sampler']} trials only)" if f.metadata["sampler"] else "")
        lines.append(f"| `{f.name}` | {names[python_type(f)]} | {f.metadata['unit'] or '—'} | "
                     f"{meaning.replace('|', chr(92) + '|')} |")
    return "\n".join(lines) + "\n"
