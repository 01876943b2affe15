"""The paper's recipes (``sweeps/*.yaml``) as the config group ``sweeps`` of every Hydra app of this repository:
``python sweep.py -m sweeps=<recipe>``, the compose API of the tests and of ``python -m analysis paper``.

A Hydra search-path plugin: Hydra finds it in the ``hydra_plugins`` namespace package (installed with recdiff, and
beside ``sweep.py``), also in a launcher's worker process, which composes the job's config again.
"""

from __future__ import annotations

from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

REPO = Path(__file__).resolve().parents[1]


class RecdiffRecipes(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        if (REPO / "sweeps").is_dir() and (REPO / "conf").is_dir():   # a checkout, not an installed copy alone
            search_path.append(provider="recdiff", path=f"file://{REPO}")
