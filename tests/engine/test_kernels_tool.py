"""``python -m recdiff.tools.kernels`` on a CPU: the profiled steps' time is split by kind, products found."""

from __future__ import annotations

import re

from recdiff.tools import kernels


def test_kinds_by_kernel_name():
    assert kernels.kind("nvjet_sm90_tst_384x8_64x4_4x1_v_bz_TNT") == "products"
    assert kernels.kind("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0") == "fused (inductor)"
    assert kernels.kind("void at::native::index_elementwise_kernel<128, 4, index_put_kernel_impl>") == "cache writes"
    assert kernels.kind("aten::mm") == "products"
    assert kernels.kind("aten::rsqrt") == "other elementwise"


def test_a_cpu_run_splits_its_steps_by_kind(capsys):
    kernels.main(["--models", "fixture", "--device", "cpu", "--r", "4", "--tokens", "3", "--no-compile"])
    out = capsys.readouterr().out
    head = re.search(r"(\d+) steps profiled, device time ([\d.]+) ms/step", out)
    assert head and int(head[1]) == 3 and float(head[2]) > 0, out
    shares = [float(x) for x in re.findall(r"ms/step\s+([\d.]+)%", out)]
    assert abs(sum(shares) - 100) < 0.5 and re.search(r"^  products ", out, re.M), out
