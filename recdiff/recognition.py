"""Which model family a checkpoint folder is: a folder fits a family when the family reads its ``config.json``
without complaint and its weight names are exactly those of the family's model at that config (:func:`recognise`);
``family=`` names the family instead, and the folder must still fit it. Above the families (:mod:`recdiff.families`)
and the model they build (:mod:`recdiff.model`), below the loader (:mod:`recdiff.checkpoint`)."""

from __future__ import annotations

import re
from typing import Any

import torch

from recdiff.errors import RecdiffError
from recdiff.families import Family, checkpoint_names, families, get_family
from recdiff.model import RecurrentDepthModel
from recdiff.model_config import RecurrentConfig

# tensors a checkpoint may hold that are not parameters: the reference's persistent RoPE table
BUFFERS = ("freqs_cis",)


def expected_weights(cfg: RecurrentConfig) -> dict[str, tuple[int, ...]]:
    """Parameter names and shapes of the family's model at ``cfg`` (built on the meta device), without a tied head."""
    with torch.device("meta"):
        model = RecurrentDepthModel(cfg, rope=False)
    out = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if cfg.tie_embeddings:
        out.pop("lm_head.weight")
    return out


_BLOCK = re.compile(r"^transformer\.(prelude|core_block|coda)\.\d+\.")


def _short(names: set[str], limit: int = 3) -> str:
    """Weight names, in full when they are few (one missing tensor is named exactly); else with the block prefix
    folded (``block norm_3.weight``), deduplicated, the first ``limit``."""
    folded = sorted(names) if len(names) <= limit else sorted({_BLOCK.sub("block ", n) for n in names})
    more = f" (+{len(folded) - limit} more)" if len(folded) > limit else ""
    return ", ".join(folded[:limit]) + more


def fit(fam: Family, raw: dict[str, Any], weights: set[str], source: str
        ) -> tuple[RecurrentConfig | None, list[str], float]:
    """``fam``'s config of a folder, what of it does not fit ``fam`` (empty: it fits), and how many weight names
    differ from the family's model (infinite when its config does not even build one)."""
    kwargs, misfits = fam.read(raw)
    try:
        cfg = RecurrentConfig.from_dict({**kwargs, "family": fam.name}, source=source)
        expected = checkpoint_names(cfg, set(expected_weights(cfg)))
    except (RecdiffError, ValueError, TypeError) as err:  # a config the family's model cannot be built from
        return None, misfits + [str(err).removeprefix(f"{source}: ")], float("inf")
    present = set(weights) - set(BUFFERS) - ({"lm_head.weight"} if cfg.tie_embeddings else set())
    missing, unexpected = expected - present, present - expected
    if missing:
        misfits.append(f"missing {_short(missing)}")
    if unexpected:
        misfits.append(f"unexpected {_short(unexpected)}")
    return cfg, misfits, len(missing) + len(unexpected)


def recognise(raw: dict[str, Any], weights: set[str], source: str, family: str | None = None) -> RecurrentConfig:
    """The config of a checkpoint (``raw``: its ``config.json``; ``weights``: its tensor names) in the one family it
    fits, or ``family`` when given; anything else is one line naming what did not fit."""
    candidates = [get_family(family)] if family else list(families().values())
    fits = {fam.name: fit(fam, raw, weights, source) for fam in candidates}
    ok = [name for name, (cfg, misfits, _) in fits.items() if cfg is not None and not misfits]
    if len(ok) == 1:
        return fits[ok[0]][0]  # type: ignore[return-value]
    if ok:
        raise RecdiffError(f"{source} fits several model families ({', '.join(ok)}); name one with model.family=")
    if family:
        raise RecdiffError(f"{source} does not fit model family {family}: {'; '.join(fits[family][1])}")
    # the closest: fewest weight names amiss, then fewest complaints about the config
    closest = min(fits, key=lambda n: (fits[n][2], len(fits[n][1])))
    others = ", ".join(n for n in fits if n != closest)
    raise RecdiffError(f"{source} fits no model family (closest, {closest}: {'; '.join(fits[closest][1])}; "
                       f"also tried {others})")
