"""pagedbench: one import name for the whole harness.

    pagedbench.engines     engines/     the three engines, KV managers, schedulers, the real and sim executors
    pagedbench.kernels     kernels/     Triton kernels and their torch references
    pagedbench.workloads   workloads/   request traces
    pagedbench.results     results/     what a run records, sweeps, the report
    pagedbench.studies     studies/     the studies the report reads
    pagedbench.conf        conf/        the Hydra config groups
    pagedbench.run, .serve, .cli        the entry points (run.py and serve.py at the root are shims)

The folders stay at the top of the repository; only their import names sit under `pagedbench`. An installed
wheel maps them there (pyproject.toml's package-dir). In a checkout (this folder beside engines/ and
pyproject.toml), the repository root is added to this package's `__path__`, so `pagedbench.engines` is the
top-level engines/ folder whether or not the checkout is installed (and in a copy of it, such as mutation
testing's). A checkout's root is then moved to the end of `sys.path`: a script or `python -m` run from the
root puts it first, where our kernels/ folder would shadow the `kernels` distribution that transformers
imports; at the end, nothing of ours is found under a top-level name before another distribution's.
"""
from __future__ import annotations

import os
from pathlib import Path
import sys

_HERE = Path(__file__).resolve().parent
_TOP = ("engines", "kernels", "workloads", "results", "studies")


def _checkout_root() -> Path | None:
    """The repository root when this package sits in a checkout (or a copy of one) beside its folders."""
    root = _HERE.parent
    return root if all((root / name / "__init__.py").is_file() for name in _TOP) else None


CHECKOUT_ROOT = _checkout_root()


def _root_last(root: Path) -> None:
    """Move every `sys.path` entry that is the checkout's root (the script's folder, "" for the working
    directory) to the end, keeping one."""
    def is_root(entry: str) -> bool:
        try:
            return Path(entry or os.getcwd()).resolve() == root
        except OSError:
            return False

    entries = [e for e in sys.path if is_root(e)]
    if entries:
        sys.path[:] = [e for e in sys.path if not is_root(e)] + [str(root)]


if CHECKOUT_ROOT is not None:
    __path__.append(str(CHECKOUT_ROOT))   # noqa: F821  (a package's own __path__)
    _root_last(CHECKOUT_ROOT)
