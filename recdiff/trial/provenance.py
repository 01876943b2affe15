"""Where and how a trial was measured: the code's git commit, the device, the library versions, the output folder and
the job's torch thread budget (recorded with every measured trial)."""

from __future__ import annotations

import importlib.metadata as md
import platform
import subprocess
from pathlib import Path
from typing import Any

PACKAGES = ("recdiff", "torch", "optuna", "numpy", "transformers", "hydra-core", "polars")


def _git(*args: str) -> str | None:
    """A git command's output in the package's folder; None outside a checkout (or without git)."""
    try:
        out = subprocess.run(["git", "-C", str(Path(__file__).resolve().parent), *args], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_commit() -> str | None:
    return _git("rev-parse", "HEAD") or None


def code_version() -> tuple[str | None, str | None]:
    """(recdiff's package version, the checkout's git commit with ``-dirty`` when tracked files have changes; None
    outside a checkout)."""
    try:
        version: str | None = md.version("recdiff")
    except md.PackageNotFoundError:
        version = None
    commit = git_commit()
    if commit and _git("status", "--porcelain", "--untracked-files=no"):
        commit += "-dirty"
    return version, commit


def library_versions() -> dict[str, str]:
    import torch

    v = {"python": platform.python_version()}
    for pkg in PACKAGES:
        try:
            v[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    if torch.version.cuda:
        v["cuda"] = torch.version.cuda
    return v


def device_name(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def provenance(device: str, output_dir: Path, threads: int | None = None) -> dict[str, Any]:
    """``threads``: the job's torch thread budget (``thread_budget``; None: not set by the job)."""
    return {"git_commit": git_commit(), "device": device_name(device), "versions": library_versions(),
            "output_dir": str(output_dir), **({"thread_budget": threads} if threads is not None else {})}
