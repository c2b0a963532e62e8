"""The report's sensitivity section: how the paged / Orca ratios of Figures 12, 15 and 17 move with the sim's
uncertain inputs, read from the table `python -m pagedbench.studies.sensitivity` writes (sensitivity.csv).

For each figure and input: the ratio at the low end, the preset and the high end of the input's range, and a
verdict on the two conclusions a reader draws from the figure: paged serves more than Orca (ratio > 1), and by
the paper's factor (ratio >= the paper's, for this setting). The prose is
docs/report/templates/sensitivity_section.md.j2.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from pagedbench.engines import registry
from pagedbench.results.report.criteria import criteria
from pagedbench.results.report.section import Section, shown, step_command, step_not_run
from pagedbench.results.report.template import render

STEP = "sensitivity"


def _ratio(row: pd.Series | None) -> str:
    if row is None or pd.isna(row["ratio"]):
        return "n/a"
    return f"{row['ratio']:.2f}x" + ("*" if row["ratio_is_bound"] else "")


def verdict(ratios: list[float], claim: float) -> str:
    """What holds over the range: "both hold", "paged ahead; below the paper's 2.3x at ..." or "reverses"."""
    low = min(ratios)
    if low >= claim:
        return f"both hold (>= {claim:g}x throughout)"
    if low > 1:
        return f"paged ahead throughout; the paper's {claim:g}x not reached (min {low:.2f}x)"
    return f"does not hold: paged falls to {low:.2f}x"


def table(t: pd.DataFrame) -> str:
    header = ["figure", "input", "range (low / preset / high)", "baseline", "low", "preset", "high", "verdict"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for fig, g in t.groupby("figure", sort=False):
        default = g[g["input"] == "default"].set_index("baseline")
        for name, gi in g[g["input"] != "default"].groupby("input", sort=False):
            for base, gb in gi.groupby("baseline", sort=False):
                gb = gb.sort_values("value")
                low, high = gb.iloc[0], gb.iloc[-1]
                preset = default.loc[base] if base in default.index else None
                values = [r for r in (low["ratio"], high["ratio"], None if preset is None else preset["ratio"])
                          if r is not None and not pd.isna(r)]
                claim = float(gb["claim"].iloc[0])
                # The paper's factor is over Orca (Oracle); over Max only "paged ahead" is judged.
                judged = (verdict(values, claim) if base == registry.label("orca_oracle")
                          else "paged ahead throughout" if min(values) >= 1 else verdict(values, 1.0))
                lines.append("| " + " | ".join([
                    str(gb["label"].iloc[0]), name, f"{low['value']:g} / preset / {high['value']:g}", base,
                    _ratio(low), _ratio(preset), _ratio(high), judged]) + " |")
    return "\n".join(lines)


def section_sensitivity(folder: Path) -> Section:
    """The section from `folder`, the sensitivity step's records (its parent is the records' root)."""
    path = Path(folder) / "sensitivity.csv"
    root = Path(folder).parent
    if not path.is_file():
        return Section(not_run=[step_not_run(STEP, root)])
    t = pd.read_csv(path, dtype={"figure": str})
    ranges = t[t["input"] != "default"].drop_duplicates("input")[["input", "range"]]
    return Section(render("sensitivity_section.md.j2", command=step_command(STEP, root), c=criteria(),
                          ratios=table(t), ranges=ranges.to_dict("records"), path=shown(path)), has_runs=True)
