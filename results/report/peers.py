"""The report's section on real peers: our engines in process and behind our server, transformers' continuous
batching in process and behind `transformers serve`, one trace and one model (`python -m studies.peers`,
its table kept in data/runs/peers_cpu/peers.json). The prose is docs/report/templates/peers_section.md.j2."""
from __future__ import annotations

import json
from pathlib import Path

from paths import OUTPUTS
from results.report.section import NotRun, Section, step_command
from results.report.steps import step
from results.report.template import render

STEP = "peers"


def section_peers(folder: Path) -> Section:
    path = folder / "peers.json"
    if not path.is_file():
        return Section("", has_runs=False, not_run=[NotRun(step(STEP).title, step_command(STEP, OUTPUTS), folder)])
    data = json.loads(path.read_text())
    rows = [[r["row"], f"{r['output_tokens_per_s']:.1f} ({r['output_tokens_per_s_min']:.1f}-"
                       f"{r['output_tokens_per_s_max']:.1f})", f"{r['ttft_s_mean']:.2f}", f"{r['tpot_s_mean']:.4f}",
             f"{r['e2e_latency_s_mean']:.2f}", f"{r['wall_s']:.0f}"] for r in data["rows"]]
    overhead = [[o["engine"].replace("_", "-"), f"{o['http_over_in_process']:.2f} ({o['min']:.2f}-{o['max']:.2f})",
                 str(o["pairs"])] for o in data["overhead"]]
    notes = folder / "notes.md"
    return Section(render("peers_section.md.j2", title=step(STEP).title, data=data, rate=data.get("rate"),
                          max_output_len=data.get("max_output_len"), rows=rows, overhead=overhead,
                          notes=notes.read_text() if notes.is_file() else ""), has_runs=True)
