"""The report's section on the sim's beam model against the real backend's beam search
(`pagedbench.studies.beam_check`). Beam persistence, calibrated to the paper's Figure 15 savings
(`pagedbench.studies.beam_persistence`), is part of the parallel sampling section (`sharing.section_persistence`).

The prose is in docs/report/templates/beams_*.md.j2; the commands shown are the build's steps
(docs/report/steps.yaml)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from pagedbench.engines.sim.build import SimBackendConfig
from pagedbench.results.report.markdown import num, pct
from pagedbench.results.report.section import Section, step_not_run, typed_command
from pagedbench.results.report.template import render


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
