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

ROOT = Path(__file__).resolve().parent
# A checkout (pyproject.toml beside this file) keeps its outputs in its own outputs/; an installed pagedbench
# (`pip install .`: ROOT is site-packages) writes them under the directory it is run from, as Hydra's runs do.
CHECKOUT = (ROOT / "pyproject.toml").is_file()
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
