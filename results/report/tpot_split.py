"""Where a peers study's TPOT goes: each request's first token gap apart from the rest of its decode.

    python -m pagedbench.results.report.tpot_split outputs/peers
    python -m pagedbench.results.report.tpot_split outputs/peers --rows "vllm (HTTP)" "paged-32 (HTTP)"

A request's TPOT is (last token - first token) / (tokens - 1), and the mean TPOT weighs every request alike,
so on a trace whose requests all arrive at once it is swayed by a few short outputs: a request of 5 tokens
whose second token waits 0.5 s for other prompts' prefills has a TPOT of 0.13 s, whatever a decode step costs.
This reads the token times of each run of a study (`python -m pagedbench.studies.peers`: every request's
`token_times_s`, as the client or the engine saw them) and splits each request's decode span into its first
gap (first to second token) and the rest. Per row, as the mean and min-max over the rounds:

- `TPOT`: the study's own figure, the mean over requests of (last - first) / (output tokens - 1);
- `first gap`: the mean first gap; `TPOT, first gap out`: the mean of each request's (last - second) /
  (times - 2), its decode steps alone (requests with 3 token times or more). A client times the chunks a
  server streams, and a chunk whose text is empty is sent with the next: a request may then have fewer times
  than tokens (one request of the peers' trace, over every server), and its gaps span two tokens;
- `ITL`: the mean gap between consecutive tokens over every token, which weighs requests by their tokens.

With --rows naming two rows, the second over the first is paired by round for each figure (`paired`).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
import sys

import numpy as np
import pandas as pd

FIGURES = ("tpot_ms", "first_gap_ms", "tpot_rest_ms", "itl_ms")
HEADER = ["row", "TPOT ms", "first gap ms", "TPOT, first gap out, ms", "ITL ms", "rounds"]


def split(token_times, output_lens=None) -> dict[str, float]:
    """The figures of one run, from each request's token times and output length (the number of its times
    when not given); requests with fewer than two times are left out."""
    lens = output_lens if output_lens is not None else [len(t) for t in token_times]
    pairs = [(np.asarray(t, dtype=float), int(n)) for t, n in zip(token_times, lens) if len(t) >= 2 and n >= 2]
    if not pairs:
        raise ValueError("no request has two token times")
    times = [t for t, _ in pairs]
    rest = [(t[-1] - t[1]) / (t.size - 2) for t in times if t.size >= 3]
    return {"tpot_ms": 1e3 * float(np.mean([(t[-1] - t[0]) / (n - 1) for t, n in pairs])),
            "first_gap_ms": 1e3 * float(np.mean([t[1] - t[0] for t in times])),
            "tpot_rest_ms": 1e3 * float(np.mean(rest)) if rest else float("nan"),
            "itl_ms": 1e3 * float(np.mean(np.concatenate([np.diff(t) for t in times])))}


def versus_vllm(setting: dict) -> tuple[str, str]:
    """The study's vLLM row and our paged server's row beside it, named by vLLM's block size (its `setting`)."""
    return "vllm (HTTP)", f"paged-{setting['vllm_block_size']} (HTTP)"


def folder_name(row: str) -> str:
    """The run folder the peers study gives a row ("paged-32 (HTTP)" -> "paged-32_http")."""
    return row.replace(" (", "_").replace(")", "").replace(" ", "_").lower()


def study_runs(study: Path) -> dict[str, list[dict]]:
    """{row name: [the figures of each round]} for every run under the study's round*/ folders whose requests
    table has token times (a run folder named by the row it runs in the study's peers.json, otherwise by its
    folder's name)."""
    listed = json.loads((study / "peers.json").read_text()).get("rows", []) if (study / "peers.json").is_file() else []
    names = {folder_name(r["row"]): r["row"] for r in listed}
    rounds = [p for p in study.glob("round*") if p.name[5:].isdigit()]
    out: dict[str, list[dict]] = {}
    for rnd in sorted(rounds, key=lambda p: int(p.name[5:])):
        for run in sorted(p for p in rnd.iterdir() if (p / "requests.parquet").is_file()):
            table = pd.read_parquet(run / "requests.parquet")
            if "token_times_s" in table and (table["token_times_s"].map(len) >= 2).any():
                out.setdefault(names.get(run.name, run.name), []).append(split(table["token_times_s"], table["output_len"]))
    return out


def cells(runs: list[dict]) -> list[str]:
    """A row's figures as table cells: the mean over the rounds and the min-max."""
    out = []
    for key in FIGURES:
        values = [r[key] for r in runs]
        out.append(f"{np.mean(values):.1f} ({min(values):.1f}-{max(values):.1f})")
    return out


def paired(first: list[dict], second: list[dict]) -> dict[str, list[float]]:
    """Each figure of `second` over `first`, round by round."""
    return {key: [b[key] / a[key] for a, b in zip(first, second)] for key in FIGURES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.results.report.tpot_split",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path, help="a peers study's --out folder")
    parser.add_argument("--rows", nargs="*", default=None, help="rows to show (default: every row with token times)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures of every round here")
    args = parser.parse_args(argv)
    runs = study_runs(args.study)
    if not runs:
        parser.error(f"{args.study}: no run with token times under round*/")
    rows = args.rows or sorted(runs)
    if missing := [r for r in rows if r not in runs]:
        parser.error(f"no runs for {missing}; rows: {sorted(runs)}")
    print("| " + " | ".join(HEADER) + " |\n|" + "---|" * len(HEADER))
    for row in rows:
        print(f"| {row} | {' | '.join(cells(runs[row]))} | {len(runs[row])} |")
    ratios = paired(runs[rows[0]], runs[rows[1]]) if len(rows) == 2 else None
    if ratios:
        print(f"\n{rows[1]} / {rows[0]}, paired by round:")
        for key, values in ratios.items():
            print(f"- {key}: {np.mean(values):.2f} ({', '.join(f'{v:.2f}' for v in values)})")
    if args.json:
        args.json.write_text(json.dumps({"runs": {r: runs[r] for r in rows}, "paired": ratios}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
