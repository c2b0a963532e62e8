"""What made a run: the code (package version, git commit, whether the tree was dirty), the machine, the
libraries, the command line and the date. Every summary, table and wandb run carries this block.

`code_version` names the code exactly enough to tell two runs apart: the commit, and for a dirty tree a
hash of its uncommitted changes (`abc123def456+dirty.1f2e3d4c`); outside a git checkout, the package
version. `result_code` is the hash of the code and data the numbers depend on (results/record/result_code.py):
two runs of one config with the same `result_code` give the same result, whatever else their commits changed;
`result_scope` is the scope that code covers (all, or sim in the report's sim steps).
Reading them costs a few git calls, once per process.
"""
from __future__ import annotations

import datetime
import functools
import hashlib
from importlib import metadata as importlib_metadata
import os
import platform
import shutil
import subprocess
import sys

from pagedbench.paths import ROOT
from pagedbench.results.record.result_code import result_code, scope_of_environment

SCHEMA_VERSION = 2          # the summary's layout: 2 adds this metadata block and run identity
LIBRARIES = ("torch", "triton", "transformers", "hydra-core", "omegaconf", "numpy", "pandas", "pyarrow", "wandb")


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _version(package: str) -> str | None:
    try:
        return importlib_metadata.version(package)
    except importlib_metadata.PackageNotFoundError:
        return None


@functools.cache
def code() -> dict:
    """The code that runs: package version, commit, dirty flag and `code_version` (see the module's doc)."""
    package = _version("pagedbench")
    commit = (_git("rev-parse", "HEAD") or "").strip() or None
    if commit is None:
        return {"package_version": package, "git_commit": None, "git_dirty": None,
                "code_version": f"pagedbench-{package}", "result_code": result_code(),
                "result_scope": scope_of_environment()}
    status = _git("status", "--porcelain", "--untracked-files=no") or ""
    dirty = bool(status.strip())
    version = commit[:12]
    if dirty:
        diff = _git("diff", "HEAD") or ""
        version += "+dirty." + hashlib.sha256(diff.encode()).hexdigest()[:8]
    return {"package_version": package, "git_commit": commit, "git_dirty": dirty, "code_version": version,
            "result_code": result_code(), "result_scope": scope_of_environment()}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpus() -> list[dict]:
    """Each GPU's name and memory, from nvidia-smi when there is one (no torch import: the sim needs none)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        name, _, mib = line.rpartition(",")
        gpus.append({"name": name.strip(), "memory_mib": int(mib) if mib.strip().isdigit() else None})
    return gpus


@functools.cache
def host() -> dict:
    pages = os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
    return {"hostname": platform.node(), "cpu": _cpu_model(), "cpu_count": os.cpu_count(),
            "memory_gib": round(pages * os.sysconf("SC_PAGE_SIZE") / 2**30, 1) if pages else None,
            "gpus": _gpus(), "os": platform.platform()}


@functools.cache
def libraries() -> dict:
    return {"python": platform.python_version(), **{name: _version(name) for name in LIBRARIES}}


def run_metadata(config: dict, argv: list[str] | None = None) -> dict:
    """The metadata block of one run: schema, code, date, command line, host, libraries, full config."""
    return {"schema_version": SCHEMA_VERSION, **code(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": [os.path.basename(sys.executable), *(sys.argv if argv is None else argv)],
            "host": host(), "libraries": libraries(), "config": config}
