"""Kernel tests run natively on a CUDA device, else under the Triton interpreter on the CPU
(TRITON_INTERPRET=1, set by tests/conftest.py before any test module is imported).
"""
import pytest
import torch


@pytest.fixture(scope="session")
def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
