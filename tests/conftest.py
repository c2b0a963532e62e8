"""Settings every test module needs before it is imported.

Triton reads TRITON_INTERPRET when it is first imported and when a kernel is
decorated, and importing transformers (any module of the real backend) may
import triton. So without a GPU the variable is set here, in the root
conftest, which pytest loads before any test module: the Triton kernels then
run under the interpreter in every test that calls them.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
