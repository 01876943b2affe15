"""The device as studies and presets name it (recdiff/device.py): a short stable slug of a CPU's or GPU's name, the
devices recorded by older trials and presets read back, and a CPU named without importing torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from recdiff.device import Device, parse_label

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("kind, name, slug", [
    ("cpu", "AMD EPYC 7763 64-Core Processor", "cpu-amd-epyc"),
    ("cpu", "Intel(R) Xeon(R) Processor", "cpu-intel-xeon"),
    ("cpu", "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", "cpu-intel-xeon"),    # no model number, no clock
    ("cpu", "13th Gen Intel(R) Core(TM) i9-13900K", "cpu-intel-core"),
    ("mps", "Apple M2 Pro", "mps-apple-m2"),
    ("cpu", "aarch64", "cpu-aarch64"),                                             # no model name: the architecture
    ("cuda", "NVIDIA H100 80GB HBM3", "cuda-h100"),
    ("cuda", "NVIDIA A100-SXM4-80GB", "cuda-a100"),                                 # no memory or form factor
    ("cuda", "NVIDIA A100-PCIE-40GB", "cuda-a100"),
    ("cuda", "Tesla T4", "cuda-t4"),
    ("cuda", "NVIDIA GeForce RTX 4090", "cuda-rtx-4090"),
    ("cpu", None, "cpu"),
])
def test_the_slug_is_the_kind_and_the_vendor_and_family_or_the_gpu_model(kind, name, slug):
    assert Device(kind, name).slug() == slug


@pytest.mark.parametrize("text, device", [
    ("cuda (NVIDIA H100 80GB HBM3)", Device("cuda", "NVIDIA H100 80GB HBM3")),
    ("cuda:1 (NVIDIA A100-SXM4-80GB)", Device("cuda", "NVIDIA A100-SXM4-80GB")),
    ("cpu (Intel(R) Xeon(R) Processor)", Device("cpu", "Intel(R) Xeon(R) Processor")),   # a preset's label
    ("cpu (x86_64, 4 threads)", Device("cpu")),          # a trial's attribute: architecture and threads, no model name
    ("cpu (, 1 threads)", Device("cpu")),
    ("cpu", Device("cpu")),
    ("", None), (None, None),
])
def test_recorded_devices_read_back_with_an_unknown_cpu_name_where_they_never_had_one(text, device):
    assert parse_label(text) == device


def test_two_devices_differ_in_kind_or_in_known_names():
    xeon = Device("cpu", "Intel(R) Xeon(R) Processor")
    assert not xeon.differs(Device("cpu")) and not Device("cpu").differs(xeon)
    assert xeon.differs(Device("cpu", "AMD EPYC 7763 64-Core Processor")) and xeon.differs(Device("cuda"))
    assert xeon.identity() == {"kind": "cpu", "name": "Intel(R) Xeon(R) Processor"}
    assert Device("cpu").identity() == {"kind": "cpu"} and xeon.label == "cpu (Intel(R) Xeon(R) Processor)"


def test_a_cpu_is_named_without_torch():
    code = ("import sys; from recdiff.device import describe; d = describe('cpu'); "
            "print(d.kind, bool(d.name), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["cpu", "True", "False"], out.stderr
