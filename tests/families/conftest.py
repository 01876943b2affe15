"""The retrofitted families' reference fixtures (tests/fixtures/retro_tiny; ``RECDIFF_RETRO_FIXTURES`` names another
folder of the same layout, e.g. held-out checkpoints made by an independent run of the reference code)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import REPO

RETRO = Path(os.environ.get("RECDIFF_RETRO_FIXTURES", REPO / "tests" / "fixtures" / "retro_tiny"))
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
