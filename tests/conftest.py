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


def _others_named_kernels() -> list[str]:
    """Installed distributions, other than pagedbench, that ship a top-level `kernels` package."""
    from importlib.metadata import packages_distributions
    return sorted(set(packages_distributions().get("kernels", ())) - {"pagedbench"})


if _others_named_kernels():
    import pytest
    pytest.exit(f"this environment has {', '.join(_others_named_kernels())}, a distribution whose import name is "
                "`kernels`, as is pagedbench's own kernels/ package: transformers >= 5.25 requires it and then "
                "imports ours in its place. Install with the pins of pyproject.toml (transformers < 5.25), or "
                "`pip uninstall kernels`.", returncode=4)
