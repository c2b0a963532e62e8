"""How the report writes a capacity or a ratio that may be only a bound ("6, lower bound"), the one warning
line of a capacity table some of whose capacities are, and a section part read from such a table."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from pagedbench.results.report.read import load_capacity
from pagedbench.results.report.section import Section, experiment_not_run, shown
from pagedbench.results.sweeps.capacity import BOUND_WORDS, CAPACITY_CSV, bound_warning


def bound_note(bound: str) -> str:
    """What follows a figure that is only a bound: ", lower bound" or ", upper bound"; "" when it is exact."""
    return "" if bound == "=" else f", {BOUND_WORDS[bound]}"


def capacity_warnings(cap: pd.DataFrame, folder: Path | None = None) -> list[str]:
    """The one warning line of a capacity table (in `folder`) some of whose capacities are only bounds; [] if none."""
    warning = bound_warning(cap)
    if warning is None:
        return []
    return [f"{shown(folder / CAPACITY_CSV)}: {warning}" if folder is not None else warning]


def ratio_cell(per_seed: pd.Series) -> str:
    """Mean ratio over seeds, with min-max when there are several: "1.85x (1.80-1.90)"."""
    per_seed = per_seed.dropna()
    if not len(per_seed):
        return "n/a"
    text = f"{per_seed.mean():.2f}x"
    return text + (f" ({per_seed.min():.2f}-{per_seed.max():.2f})" if len(per_seed) > 1 else "")


def capacity_part(experiments: Path, name: str, part: str, section: Section) -> pd.DataFrame | None:
    """The capacity table of experiment NAME for one part of `section`: without runs None, and the part named
    as not run; else the table, `section` marked as having runs and given the table's bound warning."""
    cap = load_capacity(experiments, name)
    if cap is None:
        section.not_run.append(experiment_not_run(part, name, experiments))
        return None
    section.has_runs = True
    section.warnings += capacity_warnings(cap, experiments / name)
    return cap
