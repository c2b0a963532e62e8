"""Where pagedbench's files live: the repository root and its standard folders, defined once.

Code holds no data and data folders hold no code:

    conf/                 Hydra config groups (and the hardware and model presets)
    data/traces/          input traces (JSON lines) that studies and tests replay
    data/profiles/        measured iteration profiles that the sim's fitted presets come from
    data/reference/       the paper's published figures and the earlier report's, as numbers the report quotes
    data/runs/            run records kept in the repository (real CPU runs, the swap benchmark)
    docs/                 the generated report (REPORT.md) and its figures; docs/report/ its steps and templates
    outputs/              everything a run, sweep or study writes (ignored by git)
    tests/data/           the test suite's small input files
"""
from __future__ import annotations

from pathlib import Path

from pagedbench import CHECKOUT_ROOT

# In a checkout, the folders sit beside pagedbench/ at the repository root; in an installed pagedbench (a wheel)
# they are its subpackages, so the package's own folder holds conf/ (and outputs go under the directory it is
# run from, as Hydra's runs do).
ROOT = CHECKOUT_ROOT if CHECKOUT_ROOT is not None else Path(__file__).resolve().parent
CHECKOUT = CHECKOUT_ROOT is not None and (ROOT / "pyproject.toml").is_file()
CONF = ROOT / "conf"
DATA = ROOT / "data"
TRACES = DATA / "traces"
PROFILES = DATA / "profiles"
REFERENCE = DATA / "reference"
KEPT_RUNS = DATA / "runs"
DOCS = ROOT / "docs"
REPORT = DOCS / "REPORT.md"
README = ROOT / "README.md"
REPORT_SOURCES = DOCS / "report"   # what the report is built from: its steps (steps.yaml) and templates/
FIGURES = DOCS / "figures"
OUTPUTS = ROOT / "outputs" if CHECKOUT else Path.cwd() / "outputs"
EXPERIMENTS = OUTPUTS / "experiments"
TEST_DATA = ROOT / "tests" / "data"   # the test suite's small input files

# The top folders that are pagedbench's subpackages (pagedbench.engines is engines/, ...): pyproject.toml's
# package-dir for a wheel, pagedbench/__init__.py's __path__ in a checkout.
SUBPACKAGES = ("engines", "kernels", "workloads", "results", "studies", "conf")


def module_file(module: str) -> Path | None:
    """The source file of one of our modules by its import name (`pagedbench.studies.replay` ->
    studies/replay.py, `pagedbench.run` -> pagedbench/run.py; a package -> its __init__.py), None if there is
    none in this tree."""
    parts = module.split(".")
    if parts[0] != "pagedbench":
        return None
    parts = parts[1:] if len(parts) > 1 and parts[1] in SUBPACKAGES else ["pagedbench", *parts[1:]]
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None
