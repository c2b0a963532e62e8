"""The report's parts on the sim's beam model: persistence calibrated to the paper's Figure 15 savings
(`pagedbench.studies.beam_persistence`), and the model against the real backend's beam search (`pagedbench.studies.beam_check`).

The prose is in docs/report/templates/beams_*.md.j2; the commands shown are the build's steps
(docs/report/steps.yaml)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from pagedbench.engines.sim.build import SimBackendConfig
from pagedbench.results.report.markdown import num, pct, table
from pagedbench.results.report.paper import paper
from pagedbench.results.report.section import Section, step_not_run, typed_command
from pagedbench.results.report.template import render

def persistence_gap(savings: pd.DataFrame, target: dict) -> tuple[float, float] | None:
    """How far, in points, the savings without persistence (0) run above the paper's: (least, most) over the
    widths the paper gives; None when the grid has no persistence 0."""
    if 0 not in savings.index:
        return None
    gaps = [savings.loc[0, w] - v for w, v in target.items() if v is not None]
    return (min(gaps), max(gaps)) if gaps else None


def section_persistence(path: Path) -> Section:
    """The calibration of beam persistence to the paper's Figure 15 savings (pagedbench.studies.beam_persistence), read from
    `path` (ROOT/beam_persistence/persistence.csv under the records' root ROOT)."""
    if not path.is_file():
        return Section(not_run=[step_not_run("beam_persistence", path.parent.parent)])
    t = pd.read_csv(path)
    savings = t.groupby(["persistence", "width"])["saving"].mean().unstack("width")
    target = {w: paper().saving_alpaca.get(f"beam{w}") for w in savings.columns}
    error = sum((savings[w] - v) ** 2 for w, v in target.items() if v is not None)
    best, preset = error.idxmin(), SimBackendConfig().beam_persistence
    rows = [[f"{p:g}" + (" (best fit)" if p == best else "") + (" (preset)" if p == preset else "")]
            + [num(savings.loc[p, w], ".1f") for w in savings.columns] for p in savings.index]
    rows.append(["paper"] + [num(target[w], ".1f") for w in savings.columns])
    return Section(render("beams_persistence.md.j2", command=typed_command("beam_persistence"),
                          rates=sorted(t["rate"].unique()), gap=persistence_gap(savings, target),
                          table=table(["persistence", *[f"saving % at width {w}" for w in savings.columns]], rows)),
                   has_runs=True)


def section_beam_check(path: Path) -> Section:
    """The sim's beam model against the real beam search (pagedbench.studies.beam_check), read from `path`
    (ROOT/beam_check/beam_check.csv under the records' root ROOT)."""
    if not path.is_file():
        return Section(not_run=[step_not_run("beam_check", path.parent.parent)])
    t = pd.read_csv(path)
    rows = [[str(int(r.beam_width)), num(r.fitted_decay, ".2f"), num(r.real_distinct_parents, ".2f"),
             num(r.model_distinct_parents, ".2f"), pct(r.real_saving), pct(r.sim_saving_fitted),
             pct(r.sim_saving_decay_1)] for r in t.itertuples()]
    preset = SimBackendConfig()
    return Section(render("beams_check.md.j2", command=typed_command("beam_check"), decay=preset.beam_parent_decay,
                          persistence=preset.beam_persistence,
                          gap_fit=100 * (t["sim_saving_fitted"] - t["real_saving"]).abs().max(),
                          gap_default=100 * (t["sim_saving_decay_1"] - t["real_saving"]).abs().max(),
                          rows=rows), has_runs=True)
