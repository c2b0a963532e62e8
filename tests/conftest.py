"""Settings every test module needs before it is imported.

pagedbench is imported first: in a checkout it moves the repository root to the end of `sys.path` (pytest and
`python -m pytest` put it first), so that the `kernels` distribution, which transformers 5.25 and later import,
is found before our kernels/ folder (pagedbench/__init__.py).

Triton reads TRITON_INTERPRET when it is first imported and when a kernel is
decorated, and importing transformers (any module of the real backend) may
import triton. So without a GPU the variable is set here, in the root
conftest, which pytest loads before any test module: the Triton kernels then
run under the interpreter in every test that calls them.
"""
import os

import pagedbench  # noqa: F401  (first: the checkout's root to the end of sys.path)

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

# Mutation testing (mutmut) forks a worker per mutant from a process that has run the tests: torch's OpenMP
# threads do not survive a fork (a worker's first parallel region with more than one thread hangs; one thread
# works), so under mutmut, whose every process has MUTANT_UNDER_TEST set, torch runs on one thread.
if "MUTANT_UNDER_TEST" in os.environ:
    torch.set_num_threads(1)

# Under pytest-xdist (`make test`: one worker per core) each worker's torch takes its share of the cores, not all
# of them: two workers of two threads each on two cores made every matmul wait for a core.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    torch.set_num_threads(max(1, torch.get_num_threads() // _WORKERS))

