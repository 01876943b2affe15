"""The retrofitted families' reference fixtures (tests/fixtures/retro_tiny; ``RECDIFF_RETRO_FIXTURES`` names another
folder of the same layout, e.g. held-out checkpoints made by an independent run of the reference code)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import REPO

SHIPPED = REPO / "tests" / "fixtures" / "retro_tiny"  # the folders some tests name
RETRO = Path(os.environ.get("RECDIFF_RETRO_FIXTURES", SHIPPED))
RETRO_DIRS = sorted(d for d in RETRO.iterdir() if (d / "generate.json").is_file()) if RETRO.is_dir() else []
FAMILY = {"llama": "retro_llama", "olmo": "retro_olmo"}  # the fixture spec's family → recdiff's family


def spec(d: Path) -> dict:
    return json.loads((d / "generate.json").read_text())["meta"]["spec"]


def one_per_family() -> list[Path]:
    """The first fixture folder of each family (the slower engine tests run on these)."""
    seen: dict[str, Path] = {}
    for d in RETRO_DIRS:
        seen.setdefault(spec(d)["family"], d)
    return list(seen.values())


@pytest.fixture(params=RETRO_DIRS, ids=lambda d: d.name)
def retro_dir(request: pytest.FixtureRequest) -> Path:
    return request.param


def converging_copies(root: Path) -> dict[str, Path]:
    """One checkpoint per family whose recurrence converges, under ``root``: the fixture with its adapter's state
    columns × 0.3, saved with recdiff's ``save_pretrained`` (and recognised again when loaded). A trained model's
    recurrence converges; random weights need not, and there the rounding of float32 products, which differs between
    a batch's wider matrices and one prompt's (a one-row product is another kernel), grows until a near-tie of two
    logits flips (the raw fixtures give each prompt alone what a batch gives in float64)."""
    import shutil

    import torch

    from recdiff import load_model, save_pretrained

    out = {}
    for d in one_per_family():
        model = load_model(d)
        with torch.no_grad():
            model.transformer.adapter.weight[:, : model.config.n_embd] *= 0.3
        out[d.name] = save_pretrained(model, root / d.name)
        shutil.copy(d / "prompts.json", out[d.name] / "prompts.json")
    return out


@pytest.fixture(scope="session")
def converging(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """:func:`converging_copies` once per session."""
    return converging_copies(tmp_path_factory.mktemp("converging"))


@pytest.fixture(params=[d.name for d in one_per_family()])
def conv_dir(request: pytest.FixtureRequest, converging: dict[str, Path]) -> Path:
    return converging[request.param]
