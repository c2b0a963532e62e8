"""Our engines beside real peers on this machine's CPU: in process and over HTTP, on one trace and one model.

    python -m pagedbench.studies.peers --out outputs/peers                  # 2 rounds x 8 rows, 24 ShareGPT requests
    python -m pagedbench.studies.peers --out outputs/peers --rounds 3 --requests 100 --max-output-len 0

Rows: our static, orca-max and paged engines on the real backend in process
(`run.py backend=real`) and behind our server (`serve.py`, measured by
`run.py backend=http`); transformers' continuous batching in process
(`run.py backend=transformers`) and behind `transformers serve
--continuous-batching` (measured by the same client). One model for all:
the tiny LLaMA (transformers' continuous batching cannot run OPT), its
seeded weights saved once to a local folder with a tokenizer trained here
(`pagedbench.engines.real.local_model`), which also tokenizes the trace, so every row
sees the same prompt ids (text for `transformers serve`, which takes text
only: decoded and re-encoded by the same tokenizer). One KV budget, 64 MiB
(transformers: the same bytes in whole pages of 16). Requests all arrive at
t = 0 unless `--rate` sets Poisson arrivals.

Timing on a small shared CPU drifts, so each round runs every row once, in
a shuffled (seeded) order, and the table gives each row's mean over the
rounds with its spread (min-max); the HTTP overhead of an engine is the
ratio of its HTTP row to its in-process row within each round (paired),
reported as the mean and range of those ratios. Writes every run folder
under OUT/round<r>/<row>/ and the table as OUT/peers.json and OUT/peers.md.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
import json
import os
from pathlib import Path
import random
import shutil
import subprocess
import sys

from pagedbench.engines import registry
from pagedbench.engines.peers.server_process import free_port, launched
from pagedbench.paths import ROOT

MODEL = "tiny-llama"
KV_MIB = 64
BLOCK = 16
MAX_BATCH_TOKENS = 2048   # limits.max_num_batched_tokens, as the in-process peer's
ENGINES = tuple(registry.entry(name).name for name in ("static", "orca_max", "paged"))   # ours, by registry name
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
FIGURES = ("output_tokens_per_s", "ttft_s_mean", "tpot_s_mean", "e2e_latency_s_mean", "wall_s")


@dataclass(frozen=True, slots=True)
class Row:
    name: str          # "paged (in process)", "paged (HTTP)", ...
    engine: str        # our engine's config name, or "transformers"
    http: bool


ROWS = [Row(f"{registry.label(e)} ({'HTTP' if h else 'in process'})", e, h) for e in ENGINES for h in (False, True)]
ROWS += [Row("transformers-cb (in process)", "transformers", False), Row("transformers-cb (HTTP)", "transformers", True)]


def model_dir(out: Path) -> Path:
    """The tiny LLaMA's folder (weights as backend=real builds them, the tokenizer trained here); made once."""
    folder = out / "model"
    if not (folder / "config.json").is_file():
        from pagedbench.engines.real.local_model import save_local_model
        from pagedbench.engines.specs.presets import load_model

        save_local_model(load_model(MODEL), folder)
    return folder


def trace_args(folder: Path, requests: int, rate: float | None, max_output_len: int) -> list[str]:
    cap = [f"workload.max_output_len={max_output_len}"] if max_output_len > 0 else []
    arrival = ["workload.arrival=offline"] if rate is None else ["workload.arrival=poisson",
                                                                 f"workload.request_rate={rate}"]
    return [f"model={MODEL}", "workload=sharegpt", f"workload.num_requests={requests}",
            f"workload.tokenizer=hf:{folder}", *cap, *arrival, "progress=false", "rerun=true"]


def run_py(args: list[str], log: Path) -> None:
    with open(log, "w") as out:
        done = subprocess.run([sys.executable, "run.py", *args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                              env={**os.environ, **OFFLINE})
    if done.returncode != 0:
        raise SystemExit(f"error: run.py {' '.join(args[:3])} ... failed (status {done.returncode}); see {log}")


def server_cmd(row: Row, folder: Path, port: int, serve_dir: Path) -> list[str]:
    if row.engine == "transformers":
        exe = shutil.which("transformers", path=str(Path(sys.executable).parent)) or "transformers"
        blocks = KV_MIB * 2**20 // (BLOCK * kv_bytes_per_slot())
        return [exe, "serve", str(folder), "--continuous-batching", "--cb-block-size", str(BLOCK),
                "--cb-num-blocks", str(blocks), "--cb-max-batch-tokens", str(MAX_BATCH_TOKENS),
                "--attn-implementation", "sdpa", "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    return [sys.executable, "serve.py", f"engine={row.engine}", f"model={MODEL}", f"backend.kv_budget_mib={KV_MIB}",
            f"serve.port={port}", f"serve.tokenizer=hf:{folder}", f"hydra.run.dir={serve_dir}"]


def kv_bytes_per_slot() -> int:
    """One token's K and V over every layer in fp32, the CPU's dtype (as the real backend sizes its cache)."""
    import torch

    from pagedbench.engines.real.kv_cache import bytes_per_slot
    from pagedbench.engines.specs.presets import load_model

    spec = load_model(MODEL)
    return bytes_per_slot(spec.num_layers, spec.num_kv_heads, spec.head_dim, torch.float32)


def run_row(row: Row, folder: Path, base: list[str], run_dir: Path) -> dict:
    run_dir.mkdir(parents=True, exist_ok=True)
    if not row.http:
        backend = ["backend=transformers", f"backend.cpu_kv_budget_mib={KV_MIB}", f"backend.block_size={BLOCK}"] \
            if row.engine == "transformers" else ["backend=real", f"engine={row.engine}",
                                                 f"backend.kv_budget_mib={KV_MIB}"]
        run_py([*base, *backend, f"hydra.run.dir={run_dir}"], run_dir.parent / f"{run_dir.name}.log")
    else:
        port = free_port()
        client = [f"backend.url=http://127.0.0.1:{port}", "backend.read_timeout_s=600"]
        client += [f"backend.prompt=text", f"backend.tokenizer=hf:{folder}", "backend.ignore_eos=false"] \
            if row.engine == "transformers" else []
        cmd = server_cmd(row, folder, port, run_dir.parent / f"{run_dir.name}-server")
        with launched(cmd, f"http://127.0.0.1:{port}", env=OFFLINE, cwd=ROOT,
                      log=run_dir.parent / f"{run_dir.name}-server.log"):
            run_py([*base, "backend=http", *client, f"hydra.run.dir={run_dir}"],
                   run_dir.parent / f"{run_dir.name}.log")
    summary = json.loads((run_dir / "summary.json").read_text())
    return {k: summary[k] for k in FIGURES} | {"num_finished": summary["num_finished"]}


def slug(row: Row) -> str:
    return row.name.replace(" (", "_").replace(")", "").replace(" ", "_").lower()


def table(results: dict[str, list[dict]], rounds: int) -> tuple[list[dict], list[dict]]:
    """Per row: mean and min-max of each figure over the rounds; per engine: the paired HTTP / in-process
    throughput ratios."""
    rows = []
    for row in ROWS:
        runs = results.get(row.name, [])
        if not runs:
            continue
        entry = {"row": row.name, "rounds": len(runs)}
        for key in FIGURES:
            values = [r[key] for r in runs]
            entry[key] = sum(values) / len(values)
            entry[f"{key}_min"], entry[f"{key}_max"] = min(values), max(values)
        rows.append(entry)
    overhead = []
    for engine in (*ENGINES, "transformers"):
        inproc = [r for r in ROWS if r.engine == engine and not r.http][0].name
        http = [r for r in ROWS if r.engine == engine and r.http][0].name
        pairs = [h["output_tokens_per_s"] / i["output_tokens_per_s"]
                 for i, h in zip(results.get(inproc, []), results.get(http, []))]
        if pairs:
            overhead.append({"engine": engine, "http_over_in_process": sum(pairs) / len(pairs),
                             "min": min(pairs), "max": max(pairs), "pairs": len(pairs)})
    return rows, overhead


def markdown(rows: list[dict], overhead: list[dict], command: str) -> str:
    lines = [f"`{command}`", "", "| row | output tok/s (min-max) | TTFT mean s | TPOT mean s | end-to-end mean s | "
             "wall s | rounds |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['row']} | {r['output_tokens_per_s']:.1f} ({r['output_tokens_per_s_min']:.1f}-"
                     f"{r['output_tokens_per_s_max']:.1f}) | {r['ttft_s_mean']:.2f} | {r['tpot_s_mean']:.4f} | "
                     f"{r['e2e_latency_s_mean']:.2f} | {r['wall_s']:.0f} | {r['rounds']} |")
    lines += ["", "| engine | HTTP / in-process output tok/s, paired by round (min-max) |", "|---|---|"]
    lines += [f"| {o['engine'].replace('_', '-')} | {o['http_over_in_process']:.2f} ({o['min']:.2f}-{o['max']:.2f}), "
              f"{o['pairs']} pairs |" for o in overhead]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.studies.peers", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the model, every run and the table")
    parser.add_argument("--rounds", type=int, default=2, help="times each row runs, interleaved (default 2)")
    parser.add_argument("--requests", type=int, default=24, help="ShareGPT requests of the trace (default 24)")
    parser.add_argument("--max-output-len", type=int, default=128,
                        help="cap on each request's output tokens (default 128; 0: the trace's own lengths)")
    parser.add_argument("--rate", type=float, default=None, help="Poisson arrivals (req/s); default: all at t = 0")
    parser.add_argument("--only", nargs="*", default=None, help="row names to run (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seeds each round's row order")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.requests < 1:
        parser.error("--rounds and --requests must be >= 1")
    chosen = [r for r in ROWS if args.only is None or r.name in args.only]
    if not chosen:
        parser.error(f"--only names no row; rows: {[r.name for r in ROWS]}")
    args.out.mkdir(parents=True, exist_ok=True)
    folder = model_dir(args.out)
    base = trace_args(folder, args.requests, args.rate, args.max_output_len)
    results: dict[str, list[dict]] = {}
    order_rng = random.Random(args.seed)
    for rnd in range(args.rounds):
        order = chosen[:]
        order_rng.shuffle(order)
        for row in order:
            print(f"round {rnd + 1}/{args.rounds}: {row.name}", flush=True)
            figures = run_row(row, folder, base, args.out / f"round{rnd}" / slug(row))
            results.setdefault(row.name, []).append(figures)
            print(f"  {figures['output_tokens_per_s']:.1f} output tok/s, {figures['wall_s']:.1f} s", flush=True)
    rows, overhead = table(results, args.rounds)
    command = "python -m pagedbench.studies.peers " + " ".join(argv if argv is not None else sys.argv[1:])
    (args.out / "peers.json").write_text(json.dumps({"command": command, "requests": args.requests,
                                                     "max_output_len": args.max_output_len,
                                                     "rate": args.rate, "rounds": args.rounds, "rows": rows,
                                                     "overhead": overhead, "runs": results}, indent=2) + "\n")
    text = markdown(rows, overhead, command)
    (args.out / "peers.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
