"""The report's section on real peers: our engines in process and behind our server, transformers' continuous
batching in process and behind `transformers serve`, one trace and one model (`python -m pagedbench.studies.peers`,
the records of the build's step). The prose is docs/report/templates/peers_section.md.j2.

Beside them, as "before", the same study kept from the server this one replaced (data/runs/peers_cpu/: the
standard library's threaded server with the engine on a second thread, and a client with a thread per request),
named by the commit that added it; and, round by round, our paged engine over HTTP against `transformers
serve`."""
from __future__ import annotations

import json
from pathlib import Path
import subprocess

from pagedbench.paths import OUTPUTS, ROOT
from pagedbench.results.record.console import schedule_cells
from pagedbench.results.report import tpot_split
from pagedbench.results.report.section import NotRun, Section, step_command
from pagedbench.results.report.steps import step
from pagedbench.results.report.template import render

STEP = "peers"
BEFORE = ROOT / "data" / "runs" / "peers_cpu" / "peers.json"
VERSUS = ("paged (HTTP)", "transformers-cb (HTTP)")       # our server against transformers serve


def overhead_rows(overhead: list[dict]) -> list[list[str]]:
    return [[o["engine"].replace("_", "-"), f"{o['http_over_in_process']:.2f} ({o['min']:.2f}-{o['max']:.2f})",
             str(o["pairs"])] for o in overhead]


def versus(runs: dict[str, list[dict]]) -> dict | None:
    """Our paged engine's output tok/s over HTTP over transformers serve's, paired by round (None without both)."""
    ours, theirs = runs.get(VERSUS[0], []), runs.get(VERSUS[1], [])
    pairs = [a["output_tokens_per_s"] / b["output_tokens_per_s"] for a, b in zip(ours, theirs)]
    if not pairs:
        return None
    return {"mean": sum(pairs) / len(pairs), "min": min(pairs), "max": max(pairs), "pairs": len(pairs),
            "ours": [a["output_tokens_per_s"] for a in ours], "theirs": [b["output_tokens_per_s"] for b in theirs]}


def added_by(path: Path) -> str | None:
    """The short hash of the commit that last changed `path`; None outside a git checkout."""
    try:
        done = subprocess.run(["git", "log", "--format=%h", "--", str(path)], cwd=ROOT, capture_output=True,
                              text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    hashes = done.stdout.split() if done.returncode == 0 else []
    return hashes[0] if hashes else None          # the newest first


def before() -> dict | None:
    """The kept study of the server before this one: its overhead rows and the commit that added it."""
    if not BEFORE.is_file():
        return None
    data = json.loads(BEFORE.read_text())
    return {"overhead": overhead_rows(data["overhead"]), "rounds": data.get("rounds"), "commit": added_by(BEFORE),
            "where": str(BEFORE.parent.relative_to(ROOT)), "versus": versus(data.get("runs", {}))}


def section_peers(folder: Path) -> Section:
    path = folder / "peers.json"
    if not path.is_file():
        return Section("", has_runs=False, not_run=[NotRun(step(STEP).title, step_command(STEP, OUTPUTS), folder)])
    data = json.loads(path.read_text())
    rows = [[r["row"], f"{r['output_tokens_per_s']:.1f} ({r['output_tokens_per_s_min']:.1f}-"
                       f"{r['output_tokens_per_s_max']:.1f})", f"{r['ttft_s_mean']:.2f}", f"{r['tpot_s_mean']:.4f}",
             f"{r['e2e_latency_s_mean']:.2f}", f"{r['wall_s']:.0f}"] for r in data["rows"]]
    notes = folder / "notes.md"
    gaps = token_gaps(folder, data.get("setting"))
    return Section(render("peers_section.md.j2", title=step(STEP).title, data=data, rate=data.get("rate"),
                          max_output_len=data.get("max_output_len"), rows=rows,
                          overhead=overhead_rows(data["overhead"]), versus=versus(data.get("runs", {})),
                          setting=data.get("setting"), vllm=data.get("versus_vllm"), greedy=data.get("greedy"),
                          schedule=schedule_rows(data.get("schedule") or []), not_run=data.get("not_run") or [],
                          before=before(), gaps=gaps, folder=folder.relative_to(ROOT) if folder.is_relative_to(ROOT)
                          else folder, notes=notes.read_text() if notes.is_file() else ""), has_runs=True)


def token_gaps(folder: Path, setting: dict | None) -> dict | None:
    """Each row's TPOT split into the first gap and the rest (`tpot_split`), and our paged server's figures
    over vLLM's paired by round when both ran (rows named by the study's `setting`); None when no run has
    token times."""
    runs = tpot_split.study_runs(folder)
    if not runs:
        return None
    rows = [[row, *tpot_split.cells(runs[row]), str(len(runs[row]))] for row in sorted(runs)]
    pair = tpot_split.versus_vllm(setting) if setting and "vllm_block_size" in setting else None
    ratios = None
    if pair and all(p in runs for p in pair):
        ratios = {key: sum(v) / len(v) for key, v in tpot_split.paired(runs[pair[0]], runs[pair[1]]).items()}
    return {"header": tpot_split.HEADER, "rows": rows, "versus_vllm": ratios}


def schedule_rows(schedule: list[dict]) -> list[list[str]]:
    """The schedule table: each row's batch (requests running), queue, KV usage and preemptions."""
    return [schedule_cells(e) for e in schedule]
