"""Settings every test module needs before it is imported.

Triton reads TRITON_INTERPRET when it is first imported and when a kernel is
decorated, and importing transformers (any module of the real backend) may
import triton. So without a GPU the variable is set here, in the root
conftest, which pytest loads before any test module: the Triton kernels then
run under the interpreter in every test that calls them. It also stops the
suite at once where another distribution ships a top-level `kernels`
package (transformers >= 5.25 requires one), which would shadow ours.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"


def _others_named_kernels() -> list[str]:
    """Installed distributions, other than pagedbench, that ship a top-level `kernels` package."""
    from importlib.metadata import packages_distributions
    return sorted(set(packages_distributions().get("kernels", ())) - {"pagedbench"})


_OTHERS = _others_named_kernels()
if _OTHERS:
    import pytest
    pytest.exit(f"this environment has {', '.join(_OTHERS)}, a distribution whose import name is "
                "`kernels`, as is pagedbench's own kernels/ package: transformers >= 5.25 requires it and then "
                "imports ours in its place. Install with the pins of pyproject.toml (transformers < 5.25), or "
                "`pip uninstall kernels`.", returncode=4)
