"""The house: imports point down a declared layering and go round no circle (function-level imports count; an
``if TYPE_CHECKING:`` block is a hint, not an import). The layers, lowest first, are those docs/architecture.md
lists under "Layers"; a module may import from its own layer (whose circles the second test finds) and from lower
layers only."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

from tests.conftest import REPO

# lowest first; a name covers the module or package and everything under it
LAYERS: list[tuple[str, ...]] = [
    ("recdiff.errors",),
    ("recdiff.compat", "recdiff.checks", "recdiff.timing", "recdiff.tokenizer", "recdiff.trace", "recdiff.fused",
     "recdiff.artifacts", "recdiff.device", "recdiff.digest"),
    ("recdiff.model_config", "recdiff.params", "recdiff.benchmarks"),
    ("recdiff.cache",),
    ("recdiff.layers",),
    ("recdiff.families",),
    ("recdiff.model",),
    ("recdiff.recognition", "recdiff.engine"),
    ("recdiff.checkpoint", "recdiff.samplers", "recdiff.schema", "recdiff.presets"),
    ("recdiff",),                                   # the public API (recdiff/__init__.py)
    ("recdiff.trial", "recdiff.lm_eval"),
    ("recdiff.study",),
    ("recdiff.tune",),
    ("recdiff.tools", "recdiff.bench", "recdiff.bench_authors", "analysis"),
]


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in ("recdiff", "analysis"):
        for p in (REPO / pkg).rglob("*.py"):
            parts = list(p.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = p
    return out


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    tree = ast.parse(path.read_text())
    hints = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
             for b in node.body for n in ast.walk(b)}
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if id(node) in hints:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def _graph() -> dict[str, set[str]]:
    files = _modules()
    return {m: _imports(p, m, set(files)) for m, p in files.items()}


def _layer(module: str) -> tuple[int, str]:
    """(rank, the layer name covering ``module``): the longest declared name that is the module or a parent (the
    package root, ``recdiff``, covers its own ``__init__`` alone)."""
    best = None
    for rank, names in enumerate(LAYERS):
        for n in names:
            covers = module == n or (module.startswith(n + ".") and n != "recdiff")
            if covers and (best is None or len(n) > len(best[1])):
                best = (rank, n)
    assert best is not None, f"{module} is in no layer: add it to LAYERS (and docs/architecture.md)"
    return best


def test_every_import_points_down_the_layers():
    upward = []
    for module, deps in _graph().items():
        rank, unit = _layer(module)
        for dep in deps:
            dep_rank, dep_unit = _layer(dep)
            if dep_unit != unit and dep_rank > rank:
                upward.append(f"{module} -> {dep}")
    assert not upward, "imports from a higher layer: " + "; ".join(sorted(upward))


def test_no_import_circle():
    try:
        graphlib.TopologicalSorter(_graph()).prepare()
    except graphlib.CycleError as err:
        raise AssertionError(f"import circle: {' -> '.join(err.args[1])}") from None


def test_the_check_sees_an_upward_import_and_a_circle(tmp_path):
    """The checks themselves: a function-level import counts, a TYPE_CHECKING one does not."""
    code = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from recdiff.tune import x\n" \
           "def f():\n    from recdiff.study import y\n"
    f = tmp_path / "m.py"
    f.write_text(code)
    assert _imports(f, "recdiff.engine.m", {"recdiff.engine.m", "recdiff.study", "recdiff.tune"}) == {"recdiff.study"}
    assert _layer("recdiff.engine.m")[0] < _layer("recdiff.study")[0]
    try:
        graphlib.TopologicalSorter({"a": {"b"}, "b": {"a"}}).prepare()
    except graphlib.CycleError:
        pass
    else:
        raise AssertionError("a circle went unseen")


def _study_imports() -> list[tuple[str, str, str | None]]:
    """(file, module, name) of every import of the study package from outside it (sweep.py, the other packages)."""
    out = []
    files = [REPO / "sweep.py", *(REPO / "analysis").rglob("*.py"),
             *(p for p in (REPO / "recdiff").rglob("*.py") if "study" not in p.relative_to(REPO / "recdiff").parts[:1])]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("recdiff.study"):
                out += [(path.name, node.module, a.name) for a in node.names]
            elif isinstance(node, ast.Import):
                out += [(path.name, a.name, None) for a in node.names if a.name.startswith("recdiff.study")]
    return out


def test_the_study_package_is_used_through_its_interface():
    """Other packages import the study package's names from ``recdiff.study`` (its ``_PUBLIC`` interface), never
    from its modules; and the interface holds no name that none of them uses."""
    from recdiff import study

    imports = _study_imports()
    inside = [f"{f}: {m}" + (f" import {n}" if n else "") for f, m, n in imports
              if m != "recdiff.study" or n not in study._PUBLIC]
    assert not inside, "imports of the study package's modules or of names outside its interface: " + "; ".join(inside)
    unused = set(study._PUBLIC) - {n for _, _, n in imports}
    assert not unused, f"recdiff.study exports names no other package uses: {sorted(unused)}"
