"""Decode steps at a fixed batch: our paged engine against vLLM on this CPU, schedule taken out.

    python scripts/decode_peers.py --out outputs/decode_peers                       # batches 1 8 16 32, 3 rounds
    python scripts/decode_peers.py --out outputs/decode_peers --batches 16 --rounds 5 --prompt-len 128

The peers study's trace (ShareGPT, every request at t = 0, outputs of the trace's lengths) mixes two things in
its TPOT: how long a decode step takes at a given batch, and how each engine's scheduler fills its steps (ours
keeps the paper's rule, a step of prefills or a step of decodes; vLLM's V1 scheduler puts new prompts into its
decode steps). This script keeps the first alone. Each run is `batch` requests, all at t = 0, each with a prompt
of exactly `--prompt-len` tokens (consecutive pieces of the ShareGPT prompts in the model folder's own tokens,
so every id is in the tokenizer's vocabulary) and exactly `--output-len` output tokens (EOS ignored). Every
prompt fits the first step's token budget, so each engine prefills once and then decodes the whole batch
together until every request ends at once: TPOT is the mean time of a decode step at that batch, and the
output tok/s over the decode steps is batch / TPOT.

Rows: vLLM behind `vllm serve` and our paged engine behind our server, both at vLLM's block size of 32, as the
peers study runs them (same model folder, KV bytes, limits and threads), and our paged engine in process
(`paged-32 (in process)`). Each round runs every (batch, row) once in a seeded shuffled order; the tables give
each figure's mean and min-max over the rounds, and ours over vLLM's TPOT paired by round. Writes every run
under OUT/round<r>/b<batch>-<row>/, and OUT/decode_peers.json and OUT/decode_peers.md.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
import random
import sys

from pagedbench.studies import peers

# The study's vLLM row and our paged server beside it (not its sim row: a sim step has no wall time), and our
# paged engine at vLLM's block size in process.
ROWS = (*(r for r in peers.BESIDE_VLLM if not r.sim),
        peers.Row("paged-32 (in process)", "paged", False, block=peers.VLLM_BLOCK))
VLLM = ROWS[0].name
FIGURES = ("tpot_s_mean", "output_tokens_per_s", "ttft_s_mean")


def prompt_pieces(folder: Path, count: int, length: int) -> list[list[int]]:
    """`count` prompts of exactly `length` ids: consecutive pieces of the ShareGPT prompts, tokenized by the
    model folder's tokenizer."""
    from pagedbench.workloads.sharegpt import load_sharegpt
    from pagedbench.workloads.tokenizer import load_tokenizer

    ids = load_sharegpt(None, load_tokenizer(f"hf:{folder}")).prompt_ids
    if len(ids) < count * length:
        raise SystemExit(f"error: the ShareGPT prompts hold {len(ids)} tokens, fewer than {count} x {length}")
    return [[int(t) for t in ids[i * length:(i + 1) * length]] for i in range(count)]


def write_trace(path: Path, prompts: list[list[int]], output_len: int) -> Path:
    """A trace file of the prompts, each with `output_len` output tokens, all arriving at t = 0."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for i, ids in enumerate(prompts):
            f.write(json.dumps({"id": i, "prompt_len": len(ids), "output_len": output_len, "arrival_s": 0.0,
                                "prompt_token_ids": ids}) + "\n")
    return path


def trace_args(model: str, trace: Path) -> list[str]:
    return [f"model={model}", "workload=trace", f"workload.path={trace}", "workload.arrival=trace",
            "progress=false", "rerun=true"]


def summarize(results: dict[tuple[int, str], list[dict]], batches: list[int]) -> list[dict]:
    """Per (batch, row): each figure's mean and min-max over the rounds; beside our rows, ours / vLLM's TPOT
    paired by round."""
    out = []
    for batch in batches:
        theirs = results.get((batch, VLLM), [])
        for row in ROWS:
            runs = results.get((batch, row.name), [])
            if not runs:
                continue
            entry = {"batch": batch, "row": row.name, "rounds": len(runs), **peers.spread(runs, FIGURES)}
            if row.name != VLLM and theirs:
                pairs = [a["tpot_s_mean"] / b["tpot_s_mean"] for a, b in zip(runs, theirs)]
                entry["tpot_over_vllm"] = pairs
            out.append(entry)
    return out


def markdown(rows: list[dict], command: str) -> str:
    lines = [f"`{command}`", "",
             "| batch | row | TPOT ms (min-max) | output tok/s (min-max) | TTFT ms | TPOT / vLLM's, by round | rounds |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        pairs = r.get("tpot_over_vllm")
        paired = f"{sum(pairs) / len(pairs):.2f} ({', '.join(f'{p:.2f}' for p in pairs)})" if pairs else ""
        lines.append(f"| {r['batch']} | {r['row']} | {1e3 * r['tpot_s_mean']:.1f} ({1e3 * r['tpot_s_mean_min']:.1f}-"
                     f"{1e3 * r['tpot_s_mean_max']:.1f}) | {r['output_tokens_per_s']:.1f} "
                     f"({r['output_tokens_per_s_min']:.1f}-{r['output_tokens_per_s_max']:.1f}) | "
                     f"{1e3 * r['ttft_s_mean']:.1f} | {paired} | {r['rounds']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/decode_peers.py", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the model, the traces and every run")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 16, 32], help="requests of each run")
    parser.add_argument("--prompt-len", type=int, default=64, help="tokens of every prompt (default 64)")
    parser.add_argument("--output-len", type=int, default=128, help="output tokens of every request (default 128)")
    parser.add_argument("--rounds", type=int, default=3, help="times each (batch, row) runs, interleaved")
    parser.add_argument("--seed", type=int, default=0, help="seeds each round's order")
    parser.add_argument("--model", choices=peers.MODELS, default="tiny", help="the model (default tiny, OPT)")
    parser.add_argument("--threads", type=int, default=1, help="model threads of every row (default 1)")
    parser.add_argument("--only", nargs="*", default=None, help="row names to run (default: all)")
    parser.add_argument("--vllm-venv", type=Path, default=peers.VLLM_VENV, help="vLLM's environment")
    args = parser.parse_args(argv)
    if min(args.batches) < 1 or args.rounds < 1 or args.prompt_len < 1 or args.output_len < 2:
        parser.error("--batches, --rounds and --prompt-len must be >= 1, --output-len >= 2")
    if max(args.batches) > peers.MAX_NUM_SEQS or max(args.batches) * args.prompt_len > peers.MAX_BATCH_TOKENS:
        parser.error(f"every batch's prompts must fit one step: batch <= {peers.MAX_NUM_SEQS} and batch x "
                     f"--prompt-len <= {peers.MAX_BATCH_TOKENS}")
    if not 1 <= args.threads <= (os.cpu_count() or 1):
        parser.error(f"--threads must be between 1 and this machine's {os.cpu_count()} cores")
    rows = [r for r in ROWS if args.only is None or r.name in args.only]
    if args.only is not None and (unknown := set(args.only) - {r.name for r in ROWS}):
        parser.error(f"--only: no row {sorted(unknown)}; rows: {[r.name for r in ROWS]}")
    setup = peers.Setup(args.model, peers.BLOCK, args.threads, peers.vllm_command(args.vllm_venv))
    if setup.vllm is None and any(r.engine == "vllm" for r in rows):
        raise SystemExit("error: the vLLM row needs vLLM's environment: run `make vllm-env` first")
    # A request's KV must fit: prompt and output of the largest batch within the 64 MiB the rows get.
    slots = peers.KV_MIB * 2**20 // peers.kv_bytes_per_slot(args.model)
    if max(args.batches) * (args.prompt_len + args.output_len) > slots:
        parser.error(f"the largest batch needs {max(args.batches) * (args.prompt_len + args.output_len)} KV slots; "
                     f"{peers.KV_MIB} MiB hold {slots}")
    args.out = args.out.resolve()
    folder = peers.model_dir(args.out, args.model)
    prompts = prompt_pieces(folder, max(args.batches), args.prompt_len)
    traces = {b: write_trace(args.out / "traces" / f"b{b}.jsonl", prompts[:b], args.output_len) for b in args.batches}
    results: dict[tuple[int, str], list[dict]] = {}
    rng = random.Random(args.seed)
    for rnd in range(args.rounds):
        order = [(b, r) for b in args.batches for r in rows]
        rng.shuffle(order)
        for batch, row in order:
            print(f"round {rnd + 1}/{args.rounds}: batch {batch}, {row.name}", flush=True)
            run_dir = args.out / f"round{rnd}" / f"b{batch}-{peers.slug(row)}"
            figures = peers.run_row(row, folder, trace_args(args.model, traces[batch]), run_dir, setup)
            if figures["num_finished"] != batch:
                raise SystemExit(f"error: {row.name} finished {figures['num_finished']} of {batch} requests; "
                                 f"see {run_dir}")
            results.setdefault((batch, row.name), []).append(figures)
            print(f"  TPOT {1e3 * figures['tpot_s_mean']:.1f} ms, {figures['output_tokens_per_s']:.1f} output tok/s",
                  flush=True)
    table = summarize(results, args.batches)
    command = "python scripts/decode_peers.py " + " ".join(argv if argv is not None else sys.argv[1:])
    (args.out / "decode_peers.json").write_text(json.dumps(
        {"command": command, "batches": args.batches, "prompt_len": args.prompt_len, "output_len": args.output_len,
         "rounds": args.rounds, "threads": args.threads, "model": args.model, "rows": table,
         "runs": {f"{b}|{name}": runs for (b, name), runs in results.items()}}, indent=2) + "\n")
    text = markdown(table, command)
    (args.out / "decode_peers.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
