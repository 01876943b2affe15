"""Setup of the GPU tests (tests/gpu/README.md): float32 products without TF32, and models loaded once."""

from __future__ import annotations

import pytest
import torch

from tests.gpu.common import Models


@pytest.fixture(autouse=True)
def no_tf32():
    """fp32 means fp32: TF32 (10-bit mantissa products) off for cuBLAS and cuDNN while a GPU test runs."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.get_float32_matmul_precision())
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[:2]
    torch.set_float32_matmul_precision(saved[2])


@pytest.fixture(scope="session")
def models() -> Models:
    return Models()
