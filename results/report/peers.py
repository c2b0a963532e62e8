"""The report's section on real peers: our engines in process and behind our server, transformers' continuous
batching in process and behind `transformers serve`, one trace and one model (`python -m studies.peers`,
its table kept in data/runs/peers_cpu/peers.json)."""
from __future__ import annotations

import json
from pathlib import Path

from results.report.markdown import table
from results.report.section import NotRun, Section

TITLE = "Real peers on this machine's CPU: in process and over HTTP"
COMMAND = "python -m studies.peers --out outputs/peers"


def section_peers(folder: Path) -> Section:
    path = folder / "peers.json"
    if not path.is_file():
        return Section("", has_runs=False, not_run=[NotRun(TITLE, COMMAND, folder)])
    data = json.loads(path.read_text())
    rows = [[r["row"], f"{r['output_tokens_per_s']:.1f} ({r['output_tokens_per_s_min']:.1f}-"
                       f"{r['output_tokens_per_s_max']:.1f})", f"{r['ttft_s_mean']:.2f}", f"{r['tpot_s_mean']:.4f}",
             f"{r['e2e_latency_s_mean']:.2f}", f"{r['wall_s']:.0f}"] for r in data["rows"]]
    overhead = [[o["engine"].replace("_", "-"), f"{o['http_over_in_process']:.2f} ({o['min']:.2f}-{o['max']:.2f})",
                 str(o["pairs"])] for o in data["overhead"]]
    arrivals = "all at t = 0" if data.get("rate") is None else f"Poisson at {data['rate']} req/s"
    cap = f", outputs capped at {data['max_output_len']} tokens" if data.get("max_output_len") else ""
    text = (f"## {TITLE}\n\n`{data['command']}` (tiny LLaMA, random weights saved once with a tokenizer trained "
            f"here, fp32, {data['requests']} ShareGPT requests {arrivals}{cap}, 64 MiB of KV for every engine; "
            f"{data['rounds']} rounds, each running every row once in a shuffled order; mean over the rounds and "
            f"min-max)\n\n"
            + table(["row", "output tok/s (min-max)", "TTFT mean s", "TPOT mean s", "end-to-end mean s", "wall s"],
                    rows)
            + "\n\nHTTP overhead, each engine's HTTP row over its in-process row within a round (paired):\n\n"
            + table(["engine", "HTTP / in process, output tok/s (min-max)", "pairs"], overhead) + "\n")
    notes = folder / "notes.md"
    if notes.is_file():
        text += "\n" + notes.read_text()
    return Section(text + "\n", has_runs=True)
