"""Kernel tests run natively on a CUDA device, else under the Triton interpreter on the CPU.

Triton reads TRITON_INTERPRET when a @triton.jit function is decorated, so it is set
here, at import, before any test module imports kernels.triton_*.
"""
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"


@pytest.fixture(scope="session")
def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
