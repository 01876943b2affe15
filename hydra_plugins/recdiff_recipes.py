"""The paper's recipes (``sweeps/*.yaml``) as the config group ``sweeps`` of every Hydra app of this repository:
``python sweep.py -m sweeps=<recipe>``, the compose API of the tests and of ``python -m analysis paper``.

Two Hydra plugins, found by Hydra in the ``hydra_plugins`` namespace package (installed with recdiff, and beside
``sweep.py``; a launcher's worker, which composes the job's config again, finds them too):

- :class:`RecdiffRecipes` puts the recipes on the config search path;
- :class:`RecipesSource` serves them, as the group ``sweeps`` and nothing else. A plain ``file://`` entry would
  have to be the repository's root, and Hydra's ``--help``, which lists every config group under every entry,
  would walk all of it (the virtual environment, outputs/, ...).
"""

from __future__ import annotations

from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import OmegaConf

RECIPES = Path(__file__).resolve().parents[1] / "sweeps"
GROUP = "sweeps"


class RecipesSource(ConfigSource):
    """The folder ``path`` as the config group ``sweeps``: ``sweeps/<name>`` is ``<path>/<name>.yaml``."""

    @staticmethod
    def scheme() -> str:
        return "recdiff-recipes"

    def _file(self, config_path: str) -> Path | None:
        group, _, name = self._normalize_file_name(config_path.strip("/")).partition("/")
        return Path(self.path) / name if group == GROUP and name and "/" not in name else None

    def load_config(self, config_path: str) -> ConfigResult:
        file = self._file(config_path)
        if file is None or not file.is_file():
            raise ConfigLoadError(f"Config not found: {config_path} (recipes in {self.path})")
        text = file.read_text(encoding="utf-8")
        return ConfigResult(config=OmegaConf.load(file), path=self.full_path(),
                            provider=self.provider, header=self._get_header_dict(text))

    def available(self) -> bool:
        return Path(self.path).is_dir()

    def is_group(self, config_path: str) -> bool:
        return config_path.strip("/") in ("", GROUP) and self.available()

    def is_config(self, config_path: str) -> bool:
        file = self._file(config_path)
        return file is not None and file.is_file()

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        where = config_path.strip("/")
        if where == "" and results_filter in (None, ObjectType.GROUP) and self.available():
            return [GROUP]
        if where == GROUP and results_filter in (None, ObjectType.CONFIG):
            return sorted(p.stem for p in Path(self.path).glob("*.yaml"))
        return []


class RecdiffRecipes(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        if RECIPES.is_dir():   # a checkout (an installed copy alone has no recipes)
            search_path.append(provider="recdiff", path=f"{RecipesSource.scheme()}://{RECIPES}")
