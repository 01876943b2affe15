"""The device a measurement runs on, named without loading a model: its kind (``cpu``, ``cuda``) and its name (the
CPU's model name from ``/proc/cpuinfo``, the GPU's from ``torch.cuda.get_device_name``).

A study's identity holds it (``recdiff/study/identity.py``), so that trials timed on a CPU and a GPU, or on an A100
and an H100, never share a Pareto front; a tuned preset records it and names itself after its short slug
(``cpu-amd-epyc``, ``cuda-h100``). Naming a CPU reads a file and needs no torch, so a CPU sweep starts no slower.
"""

from __future__ import annotations

import functools
import platform
import re
import subprocess
from dataclasses import dataclass

# Words of a device name that say nothing of the model: trademarks, clock speeds, core counts, "CPU", "Processor".
_NOISE = re.compile(r"\((?:R|TM)\)|®|™|@.*$|\b\d+(?:\.\d+)?\s*[GM]Hz\b|\b\d+-Core\b|\bCPU\b|\bProcessor\b", re.I)
CPU_VENDORS = ("intel", "amd", "apple", "arm", "ampere", "qualcomm", "hygon", "ibm")
GPU_WORDS = {"nvidia", "tesla", "geforce", "quadro", "amd", "radeon", "instinct", "pcie", "sxm", "hbm", "hbm2",
             "hbm2e", "hbm3", "hbm3e", "nvl"}
# A recorded trial's ``device`` attribute (recdiff/trial/provenance.py) names a CPU by its architecture and torch's
# threads ("cpu (x86_64, 4 threads)"): not a model name, so such a CPU's name is unknown.
_OLD_CPU = re.compile(r",\s*\d+ threads?$")


@dataclass(frozen=True)
class Device:
    kind: str                 # cpu | cuda | mps ...
    name: str | None = None   # the CPU's or GPU's model name; None: unknown (never a conflict)

    @property
    def label(self) -> str:
        """``cpu (<model name>)``, ``cuda (<GPU name>)``: how presets and messages show it."""
        return f"{self.kind} ({self.name})" if self.name else self.kind

    def identity(self) -> dict[str, str]:
        """The part of a study's identity: kind, and name where known."""
        return {"kind": self.kind, **({"name": self.name} if self.name else {})}

    def slug(self) -> str:
        """A short stable name for study and preset names: the kind, then the vendor and family of a CPU
        (``cpu-intel-xeon``) or the model of a GPU (``cuda-h100``)."""
        short = name_slug(self.name, self.kind) if self.name else ""
        return f"{self.kind}-{short}" if short else self.kind

    def differs(self, other: Device) -> bool:
        """Another kind, or another name where both are known."""
        return self.kind != other.kind or (self.name is not None and other.name is not None
                                           and self.name != other.name)


@functools.cache
def cpu_name() -> str | None:
    """The processor's model name: ``/proc/cpuinfo`` (Linux), ``sysctl`` (macOS), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    if platform.system() == "Darwin":
        try:
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                 timeout=5)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or None


def describe(device: str) -> Device:
    """A resolved device (``cpu``, ``cuda``, ``cuda:1``, as ``recdiff.checkpoint.resolve_device`` gives it) with its
    name. Only a CUDA device imports torch."""
    kind = str(device).split(":", 1)[0]
    if kind == "cuda":
        import torch

        return Device(kind, torch.cuda.get_device_name(torch.device(device)))
    return Device(kind, cpu_name() if kind in ("cpu", "mps") else None)


def parse_label(text: str | None) -> Device | None:
    """A device as recorded: a label (``cuda (NVIDIA H100 80GB HBM3)``, ``cpu (AMD EPYC 7763 64-Core Processor)``),
    or a trial's ``device`` attribute, whose CPU name (architecture and threads) is unknown. None when empty."""
    if not text or not str(text).strip():
        return None
    m = re.fullmatch(r"([A-Za-z]+)(?::\d+)?(?:\s*\((.*)\))?", str(text).strip())
    if m is None:
        return Device(str(text).strip())
    kind, inner = m.group(1).lower(), (m.group(2) or "").strip() or None
    if kind == "cpu" and inner and _OLD_CPU.search(inner):
        inner = None
    return Device(kind, inner)


def name_slug(name: str, kind: str = "cpu") -> str:
    """Lowercase vendor and family of a CPU (``AMD EPYC 7763 64-Core Processor`` → ``amd-epyc``,
    ``Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz`` → ``intel-xeon``), or the model of a GPU
    (``NVIDIA H100 80GB HBM3`` → ``h100``, ``NVIDIA GeForce RTX 4090`` → ``rtx-4090``): no trademarks, clocks or
    memory sizes, so that it stays the same across a family's steppings and memory variants."""
    words = re.findall(r"[a-z0-9]+", _NOISE.sub(" ", name).lower())
    if kind == "cpu" or kind == "mps":
        at = next((i for i, w in enumerate(words) if w in CPU_VENDORS), None)
        return "-".join(words[at:at + 2] if at is not None else words[:2])
    words = [w for w in words if w not in GPU_WORDS and not re.fullmatch(r"\d+gb|sxm\d*", w)]
    model = next((w for w in words if re.fullmatch(r"[a-z]+\d+[a-z]*", w)), None)
    return model or "-".join(words[:2])
