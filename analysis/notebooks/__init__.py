"""Figure notebooks: jupytext percent-format sources here, executed headless into `.ipynb`.

Each source has a cell tagged `parameters` (`study = ...`, `out_dir = ...`); `render` injects a
cell after it with the real values (papermill's convention, tag `injected-parameters`), runs the
notebook with nbclient and writes it, outputs included, under `out_dir`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jupytext
import nbformat
from nbclient import NotebookClient

from recdiff.errors import RecdiffError

HERE = Path(__file__).parent
REPO_ROOT = HERE.parent.parent  # kernels start here so that `import analysis` works uninstalled


def available() -> list[str]:
    """Notebook names. `paper` takes the folder of `python -m analysis paper`; the others take one study."""
    return sorted(p.stem for p in HERE.glob("*.py") if p.name != "__init__.py")


def _kernel_name() -> str:
    """'python3' when registered; otherwise register ipykernel's spec for this interpreter."""
    from jupyter_client.kernelspec import KernelSpecManager
    if "python3" not in KernelSpecManager().find_kernel_specs():
        from ipykernel.kernelspec import install
        install(user=True)
    return "python3"


def _parameters(nb: nbformat.NotebookNode, params: dict[str, Any]) -> nbformat.NotebookNode:
    source = "# Parameters\n" + "".join(f"{k} = {v!r}\n" for k, v in params.items())
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
    at = next((i + 1 for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])), 0)
    nb.cells.insert(at, cell)
    return nb


def render(name: str, source: Any, out_dir: str | Path | None = None, *, study_name: str | None = None,
           timeout: int = 600, extra: dict[str, Any] | None = None) -> Path:
    """Execute notebook `name` on study/dir `source`; write `<out_dir>/<name>.ipynb` (default
    `outputs/<study>/notebooks/`). Figures the notebook saves go to the same folder."""
    path = HERE / f"{name}.py"
    if not path.is_file():
        raise RecdiffError(f"no notebook {name!r} (available: {', '.join(available())})")
    if out_dir is None:
        from analysis.trials import resolve
        out_dir = Path("outputs") / resolve(source, study_name).name / "notebooks"
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    src = source if "://" in str(source) else str(Path(os.fspath(source)).resolve()) \
        if Path(os.fspath(source)).exists() else str(source)
    nb = _parameters(jupytext.read(path), {"study": src, "out_dir": str(out), "study_name": study_name,
                                           **(extra or {})})
    client = NotebookClient(nb, timeout=timeout, kernel_name=_kernel_name(),
                            resources={"metadata": {"path": str(REPO_ROOT)}})
    target = out / f"{name}.ipynb"
    try:
        client.execute()
    finally:  # a failing notebook is still written, with the traceback in its outputs
        nbformat.write(nb, target)
    return target


def render_all(source: Any, out_dir: str | Path | None = None, *, study_name: str | None = None,
               progress: Any = print) -> list[Path]:
    paths = []
    names = [n for n in available() if n != "paper"]   # `paper` reads a `python -m analysis paper` folder instead
    for i, name in enumerate(names, 1):
        paths.append(render(name, source, out_dir, study_name=study_name))
        if progress:
            progress(f"[{i}/{len(names)}] {name}: {paths[-1]}")
    return paths
