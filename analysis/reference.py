"""The reference point of every relative number (Table 1's relative row, the speed-up table, the claims): which trials
are the reference (the study's ``run.reference``, static AR at r=32 by default), what it is called, the accuracy
change against it; the trials that can be compared with it (:func:`comparable`); and the trials of any sampler
setting written as one line (:func:`trials_of`)."""
from __future__ import annotations

from typing import Any

import polars as pl

from analysis.intervals import Est
from analysis.labels import SAMPLER_NAMES, setting
from analysis.trials import check_identities
from recdiff.errors import RecdiffError

REFERENCE_R = 32
PAPER_REFERENCE = "Static AR (r=32)"   # the paper's reference, as `reference_label` names it
# The settings static AR at r=32 runs with as the recorded baseline (recdiff.study.baselines); among several
# r=32 trials the reference is the one with these settings (a missing value counts as the default), else the
# most common value of each.
REFERENCE_SETTINGS: dict[str, Any] = {"kv_cache": "shared", "init_scale": 0.0}


def reference_trials(df: pl.DataFrame) -> pl.DataFrame:
    """The trials of `df` that are the reference point (empty when there is none): those whose sampler is the study's
    reference as their config records it (`run.reference`, column `is_reference`: static AR at r=32 unless the study
    named another); for trials without a recorded config, static AR at r=32 picked by its settings."""
    if "is_reference" in df.columns and df["is_reference"].drop_nulls().len():
        return df.filter(pl.col("is_reference").fill_null(False))
    if "sampler" not in df.columns or "r" not in df.columns:
        return df.clear()
    ref = df.filter((pl.col("sampler") == "static") & (pl.col("r") == REFERENCE_R))
    for key, default in REFERENCE_SETTINGS.items():
        if ref.is_empty() or key not in ref.columns or ref[key].null_count() == ref.height:
            continue
        is_default = (pl.col(key).is_null() | (pl.col(key) == default)).fill_null(False)
        if not ref.filter(is_default).is_empty():
            ref = ref.filter(is_default)
        else:
            common = ref[key].drop_nulls().value_counts(sort=True)[key][0]
            ref = ref.filter(pl.col(key) == common)
    return ref


def trials_of(df: pl.DataFrame, text: str) -> pl.DataFrame:
    """The trials of `df` that ran the sampler and settings one line names, as `run.reference` is written ("diffusion":
    its defaults; "loopspec r=32"). Every setting of the sampler is compared, unset ones (None) too; a null cell counts
    as the sampler's default (a trial recorded before the setting existed), a column the table lacks is not compared."""
    from recdiff.params import parse_sampler

    params = parse_sampler(text)
    if "sampler" not in df.columns:
        return df.clear()
    out = df.filter(pl.col("sampler") == params.name)
    for key, (default, _) in params.spec().items():
        if key not in out.columns:
            continue
        want = getattr(getattr(params, key), "value", getattr(params, key))   # an Enum's value, as the table holds it
        hit = pl.col(key).is_null() if want is None else pl.col(key) == want
        out = out.filter((hit | pl.col(key).is_null()) if want == default else hit)
    return out


def reference_label(df: pl.DataFrame) -> str:
    """What the trials of `df` were timed against, as tables and headers name it: "Static AR (r=32)" by default,
    else the study's `run.reference` ("Diff. Sampler (r′=8)"); several references read "their references"."""
    from recdiff.params import parse_sampler
    from recdiff.schema import DEFAULT_REFERENCE

    texts = df["speed_reference"].drop_nulls().unique().to_list() if "speed_reference" in df.columns else []
    if len(texts) > 1:
        return "their references"
    try:
        params = parse_sampler(texts[0] if texts else DEFAULT_REFERENCE)
    except RecdiffError:
        return str(texts[0])
    defaults = {k: d for k, (d, _) in params.spec().items()}
    shown = [setting(k, v) for k, v in params.params().items()
             if v != defaults[k] or (params.name == "static" and k == "r")]
    name = SAMPLER_NAMES.get(params.name, params.name)
    return f"{name} ({', '.join(shown)})" if shown else name


def is_paper_reference(df: pl.DataFrame) -> bool:
    """Whether the trials were timed against the paper's reference, static AR at r=32."""
    return reference_label(df) == PAPER_REFERENCE


def delta_accuracy(acc: Est, ref: Est) -> Est:
    """Accuracy change against the reference in points, with its interval (MOVER from the two Wilson intervals:
    Newcombe's hybrid score interval for a difference of proportions)."""
    return (acc - ref).scaled(100.0)


def comparable(df: pl.DataFrame, purpose: str) -> pl.DataFrame:
    """COMPLETE trials with both objectives, from one identity per benchmark (else RecdiffError naming ``purpose``),
    with the columns the tables group by: ``benchmark`` (null when absent), ``sampler`` (diffusion when absent) and
    ``number``."""
    return _with_defaults(_measured(df, purpose))


def _measured(df: pl.DataFrame, purpose: str) -> pl.DataFrame:
    """COMPLETE trials with both objectives, from one identity per benchmark (else RecdiffError)."""
    check_identities(df)
    if "state" in df.columns:
        df = df.filter(pl.col("state") == "COMPLETE")
    df = df.filter(pl.col("accuracy").is_not_null() & pl.col("tokens_per_s").is_not_null())
    if df.is_empty():
        raise RecdiffError(f"no complete trials with accuracy and tokens_per_s to {purpose}")
    return df


def _with_defaults(df: pl.DataFrame) -> pl.DataFrame:
    if "benchmark" not in df.columns:
        df = df.with_columns(pl.lit(None, pl.String).alias("benchmark"))
    if "sampler" not in df.columns:
        df = df.with_columns(pl.lit("diffusion").alias("sampler"))
    if "number" not in df.columns:
        df = df.with_row_index("number").with_columns(pl.col("number").cast(pl.Int64))
    return df.with_columns(pl.col("sampler").fill_null("diffusion").cast(pl.String))
