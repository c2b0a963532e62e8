"""Our engines beside real peers on this machine's CPU: in process and over HTTP, on one trace and one model.

    python -m pagedbench.studies.peers --out outputs/peers                  # 2 rounds x 8 rows, 24 ShareGPT requests
    python -m pagedbench.studies.peers --out outputs/peers --rounds 3 --requests 100 --max-output-len 0
    make vllm-env && python -m pagedbench.studies.peers --out outputs/vllm --model tiny --threads 1 \
        --requests 100 --max-output-len 0 --only "vllm (HTTP)" "paged-32 (HTTP)" "paged-32 (sim)"

Rows: our static, orca-max and paged engines on the real backend in process
(`run.py backend=real`) and behind our server (`serve.py`, measured by
`run.py backend=http`); transformers' continuous batching in process
(`run.py backend=transformers`) and behind `transformers serve
--continuous-batching` (measured by the same client); and vLLM itself
behind `vllm serve`, when its environment exists (`make vllm-env` builds
.venv-vllm), beside our paged engine behind our server and on the sim at
vLLM's block size (vLLM's CPU backend takes blocks of 32 tokens only: the
"-32" rows; the other rows use `--block-size`). One model for all:
the tiny LLaMA by default (transformers' continuous batching cannot run OPT;
`--model tiny` runs the OPT one without the transformers rows), its
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
reported as the mean and range of those ratios. `--threads N` gives every
row N model threads (OMP_NUM_THREADS; vLLM's CPU worker bound to N cores).

Each server's schedule is read from its /metrics while the run goes on (ours
exports vLLM's names): requests running and waiting, KV usage and
preemptions, sampled every 0.2 s (`Schedule`). After its timed run, vLLM's
and our paged server each answer the trace's first prompts once more with
greedy decoding and their token ids (`return_token_ids`), and the table says
how many of those tokens agree. Writes every run folder under
OUT/round<r>/<row>/ and the table as OUT/peers.json and OUT/peers.md.
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
import threading
import time
import urllib.request

from pagedbench.engines import registry
from pagedbench.engines.peers.server_process import free_port, launched
from pagedbench.paths import ROOT
from pagedbench.results.record.console import schedule_cells

MODEL = "tiny-llama"
MODELS = ("tiny-llama", "tiny")      # the OPT one: ours and vLLM only (transformers' continuous batching cannot)
KV_MIB = 64
BLOCK = 16
VLLM_VENV = ROOT / ".venv-vllm"       # `make vllm-env`
VLLM_BLOCK = 32                       # vLLM's CPU backend takes block sizes in multiples of 32 only
GREEDY_PROMPTS = 8                    # the trace's first prompts, answered greedily by vLLM and by us
GREEDY_TOKENS = 16
SCHEDULE_EVERY_S = 0.2
MAX_BATCH_TOKENS = 2048   # limits.max_num_batched_tokens, as the in-process peer's
MAX_NUM_SEQS = 256        # limits.max_num_seqs
ENGINES = tuple(registry.entry(name).name for name in ("static", "orca_max", "paged"))   # ours, by registry name
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
FIGURES = ("output_tokens_per_s", "ttft_s_mean", "tpot_s_mean", "e2e_latency_s_mean", "wall_s")


@dataclass(frozen=True, slots=True)
class Row:
    name: str          # "paged (in process)", "paged (HTTP)", ...
    engine: str        # our engine's config name, or "transformers" or "vllm"
    http: bool
    sim: bool = False  # our engine on the simulated backend (its schedule beside the real ones')
    block: int | None = None   # this row's block size; None: the study's --block-size


ROWS = [Row(f"{registry.label(e)} ({'HTTP' if h else 'in process'})", e, h) for e in ENGINES for h in (False, True)]
ROWS += [Row("transformers-cb (in process)", "transformers", False), Row("transformers-cb (HTTP)", "transformers", True)]
# vLLM, and our paged engine at its block size behind our server and on the sim: they run when vLLM does.
BESIDE_VLLM = [Row("vllm (HTTP)", "vllm", True, block=VLLM_BLOCK),
               Row("paged-32 (HTTP)", "paged", True, block=VLLM_BLOCK),
               Row("paged-32 (sim)", "paged", False, sim=True, block=VLLM_BLOCK)]
ROWS += BESIDE_VLLM
OURS_BESIDE_VLLM = "paged-32 (HTTP)"       # the row vLLM is paired with, and its greedy tokens compared to
# The sim's device: the preset fitted on this CPU for the tiny OPT model (data/profiles/cpu_tiny.parquet), not
# refitted here; other models on the CPU's roofline preset (a fitted preset times only its own model). For an
# offline trace the sim schedules the same iterations whatever its clock: only time-weighted figures move.
SIM_HARDWARE = {"tiny": "cpu-tiny"}
SIM_ROOFLINE = "cpu"


def sim_hardware(model: str) -> str:
    return SIM_HARDWARE.get(model, SIM_ROOFLINE)


@dataclass(frozen=True, slots=True)
class Setup:
    """What every row of one study shares."""

    model: str = MODEL
    block: int = BLOCK                # our paged engine's block size, transformers' page size, vLLM's block
    threads: int | None = None        # model threads of every row; None: each one's default
    vllm: Path | None = None          # vLLM's `vllm` command (.venv-vllm/bin/vllm), when it is installed


def vllm_command(venv: Path = VLLM_VENV) -> Path | None:
    """`vllm` of a built vLLM environment (`make vllm-env` marks it .installed); None without one."""
    exe = venv / "bin" / "vllm"
    return exe if (venv / ".installed").is_file() and exe.is_file() else None


def model_dir(out: Path, model: str = MODEL) -> Path:
    """The model's folder (weights as backend=real builds them, the tokenizer trained here); made once."""
    folder = out / ("model" if model == MODEL else f"model-{model}")
    if not (folder / "config.json").is_file():
        from pagedbench.engines.real.local_model import save_local_model
        from pagedbench.engines.specs.presets import load_model

        save_local_model(load_model(model), folder)
    return folder


def trace_args(folder: Path, requests: int, rate: float | None, max_output_len: int, model: str = MODEL) -> list[str]:
    cap = [f"workload.max_output_len={max_output_len}"] if max_output_len > 0 else []
    arrival = ["workload.arrival=offline"] if rate is None else ["workload.arrival=poisson",
                                                                 f"workload.request_rate={rate}"]
    return [f"model={model}", "workload=sharegpt", f"workload.num_requests={requests}",
            f"workload.tokenizer=hf:{folder}", *cap, *arrival, "progress=false", "rerun=true"]


def thread_env(threads: int | None) -> dict[str, str]:
    """The environment that gives a row `threads` model threads: torch's (ours, transformers) and vLLM's CPU
    worker, bound to the first `threads` cores."""
    if threads is None:
        return {}
    cores = "0" if threads == 1 else f"0-{threads - 1}"
    return {"OMP_NUM_THREADS": str(threads), "VLLM_CPU_OMP_THREADS_BIND": cores}


def run_py(args: list[str], log: Path, env: dict | None = None) -> None:
    with open(log, "w") as out:
        done = subprocess.run([sys.executable, "run.py", *args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                              env={**os.environ, **OFFLINE, **(env or {})})
    if done.returncode != 0:
        raise SystemExit(f"error: run.py {' '.join(args[:3])} ... failed (status {done.returncode}); see {log}")


def engine_args(row: Row, setup: Setup) -> list[str]:
    """Our engine and its block size (the paged engine's; the contiguous engines have no blocks)."""
    size = row.block or setup.block
    block = [f"engine.block_size={size}"] if row.engine == "paged" and size != BLOCK else []
    return [f"engine={row.engine}", *block]


def server_cmd(row: Row, folder: Path, port: int, serve_dir: Path, setup: Setup = Setup()) -> list[str]:
    if row.engine == "transformers":
        exe = shutil.which("transformers", path=str(Path(sys.executable).parent)) or "transformers"
        blocks = KV_MIB * 2**20 // (setup.block * kv_bytes_per_slot(setup.model))
        return [exe, "serve", str(folder), "--continuous-batching", "--cb-block-size", str(setup.block),
                "--cb-num-blocks", str(blocks), "--cb-max-batch-tokens", str(MAX_BATCH_TOKENS),
                "--attn-implementation", "sdpa", "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    if row.engine == "vllm":
        if setup.vllm is None:
            raise SystemExit("error: the vLLM row needs vLLM's environment: run `make vllm-env` first")
        from pagedbench.engines.specs.presets import load_model

        # Like for like: the same KV bytes (fp32, as our CPU backend), limits and block size as our engines;
        # no prefix caching and no chunked prefill (ours have neither by default); eager (no compile).
        return [str(setup.vllm), "serve", str(folder), "--host", "127.0.0.1", "--port", str(port),
                "--dtype", "float32", "--block-size", str(row.block or VLLM_BLOCK),
                "--kv-cache-memory-bytes", str(KV_MIB * 2**20), "--max-num-seqs", str(MAX_NUM_SEQS),
                "--max-num-batched-tokens", str(MAX_BATCH_TOKENS),
                "--max-model-len", str(load_model(setup.model).max_seq_len), "--no-enable-prefix-caching",
                "--no-enable-chunked-prefill", "--enforce-eager", "--seed", "0"]
    return [sys.executable, "serve.py", *engine_args(row, setup), f"model={setup.model}",
            f"backend.kv_budget_mib={KV_MIB}", f"serve.port={port}", f"serve.tokenizer=hf:{folder}",
            f"hydra.run.dir={serve_dir}"]


def kv_bytes_per_slot(model: str = MODEL) -> int:
    """One token's K and V over every layer in fp32, the CPU's dtype (as the real backend sizes its cache)."""
    import torch

    from pagedbench.engines.real.kv_cache import bytes_per_slot
    from pagedbench.engines.specs.presets import load_model

    spec = load_model(model)
    return bytes_per_slot(spec.num_layers, spec.num_kv_heads, spec.head_dim, torch.float32)


class Schedule:
    """A server's schedule as its /metrics tells it while a run goes on: every `every_s`, the requests running
    and waiting, the KV usage and the preemptions so far (vLLM's names, which our server exports too; a
    series with several label sets is summed). Start and stop around the run; `figures()` sums it up."""

    def __init__(self, url: str, every_s: float = SCHEDULE_EVERY_S):
        self.url, self.every_s = url.rstrip("/"), every_s
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="schedule", daemon=True)

    def __enter__(self) -> "Schedule":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)
        self.sample()            # the counters' last values, after the run

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.every_s)

    def sample(self) -> None:
        try:
            with urllib.request.urlopen(self.url + "/metrics", timeout=5) as response:
                text = response.read().decode()
        except OSError:
            return
        self.samples.append({"t": time.monotonic(), **metric_values(text)})

    def figures(self) -> dict:
        return schedule_figures(self.samples)


SCHEDULE_SERIES = {"running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting",
                   "kv_usage": "vllm:kv_cache_usage_perc", "preemptions": "vllm:num_preemptions_total"}


def metric_values(text: str) -> dict[str, float]:
    """{running, waiting, kv_usage, preemptions} from Prometheus text (a missing series is left out)."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[str, float] = {}
    names = {v: k for k, v in SCHEDULE_SERIES.items()}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in names:
                key = names[sample.name]
                totals[key] = totals.get(key, 0.0) + sample.value
    return totals


def schedule_figures(samples: list[dict]) -> dict:
    """The schedule's figures over the samples taken while something ran: the mean and peak of the requests
    running (the batch), the mean waiting, the peak KV usage, and the preemptions in all (the counter's last
    value). None where no sample had the series."""
    busy = [s for s in samples if s.get("running", 0) > 0]

    def mean(key: str) -> float | None:
        values = [s[key] for s in busy if key in s]
        return sum(values) / len(values) if values else None

    def peak(key: str) -> float | None:
        values = [s[key] for s in samples if key in s]
        return max(values) if values else None

    last = [s["preemptions"] for s in samples if "preemptions" in s]
    return {"running_mean": mean("running"), "running_max": peak("running"), "waiting_mean": mean("waiting"),
            "kv_usage_max": peak("kv_usage"), "preemptions": last[-1] if last else None, "samples": len(samples)}


def greedy_tokens(url: str, prompts: list[list[int]], max_tokens: int = GREEDY_TOKENS) -> list[list[int] | None]:
    """Each prompt answered alone, greedily (temperature 0, EOS ignored), as the token ids the server returns
    (`return_token_ids`, vLLM's and ours); None for a prompt it did not answer."""
    model = json.loads(urllib.request.urlopen(url + "/v1/models", timeout=30).read())["data"][0]["id"]
    out: list[list[int] | None] = []
    for prompt in prompts:
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
                "ignore_eos": True, "return_token_ids": True}
        request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=300) as response:
                choice = json.loads(response.read())["choices"][0]
            out.append([int(t) for t in choice["token_ids"]])
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            out.append(None)
    return out


def agreement(ours: list[list[int] | None], theirs: list[list[int] | None]) -> dict:
    """How many greedy tokens agree, over the prompts both answered: the tokens equal up to each first
    difference, the prompts equal throughout, and how many were compared."""
    both = [(a, b) for a, b in zip(ours, theirs) if a is not None and b is not None]
    same = 0
    for a, b in both:
        for x, y in zip(a, b):
            if x != y:
                break
            same += 1
    return {"prompts": len(both), "prompts_equal": sum(a == b for a, b in both),
            "tokens_equal_before_a_difference": same, "tokens": sum(min(len(a), len(b)) for a, b in both)}


def run_row(row: Row, folder: Path, base: list[str], run_dir: Path, setup: Setup = Setup(),
            greedy: list[list[int]] | None = None) -> dict:
    """One row's run: its figures, and for a server its schedule (and, given `greedy` prompts, its greedy
    token ids for them, asked after the timed run)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    env = thread_env(setup.threads)
    extra: dict = {}
    if row.sim:
        slots = KV_MIB * 2**20 // kv_bytes_per_slot(setup.model)       # the real runs' KV, in token slots
        run_py([*base, "backend=sim", f"hardware={sim_hardware(setup.model)}", *engine_args(row, setup),
                f"backend.kv_budget_slots={slots}", f"hydra.run.dir={run_dir}"], run_dir.parent / f"{run_dir.name}.log")
    elif not row.http:
        backend = ["backend=transformers", f"backend.cpu_kv_budget_mib={KV_MIB}",
                   f"backend.block_size={setup.block}"] if row.engine == "transformers" else \
            ["backend=real", *engine_args(row, setup), f"backend.kv_budget_mib={KV_MIB}"]
        run_py([*base, *backend, f"hydra.run.dir={run_dir}"], run_dir.parent / f"{run_dir.name}.log", env)
    else:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        client = [f"backend.url={url}", "backend.read_timeout_s=600"]
        client += [f"backend.prompt=text", f"backend.tokenizer=hf:{folder}", "backend.ignore_eos=false"] \
            if row.engine == "transformers" else []
        cmd = server_cmd(row, folder, port, run_dir.parent / f"{run_dir.name}-server", setup)
        with launched(cmd, url, env={**OFFLINE, **env}, cwd=ROOT, log=run_dir.parent / f"{run_dir.name}-server.log",
                      ready_timeout_s=300):
            with Schedule(url) as schedule:
                run_py([*base, "backend=http", *client, f"hydra.run.dir={run_dir}"],
                       run_dir.parent / f"{run_dir.name}.log")
            extra["schedule"] = schedule.figures()
            if greedy:
                extra["greedy"] = greedy_tokens(url, greedy)
    summary = json.loads((run_dir / "summary.json").read_text())
    if not row.http and row.engine != "transformers":
        extra["schedule"] = record_schedule(run_dir)
    return {k: summary[k] for k in FIGURES} | {"num_finished": summary["num_finished"]} | extra


def record_schedule(run_dir: Path) -> dict | None:
    """The schedule of an in-process run from its own record (iterations.parquet), weighted by each
    iteration's time as /metrics samples are: the mean and peak of the requests held (running), the mean
    waiting, the peak KV usage (slots not free) and the preemptions in all; None without the table."""
    import pandas as pd

    path = run_dir / "iterations.parquet"
    if not path.is_file():
        return None
    rows = pd.read_parquet(path)
    busy = rows[rows["num_held"] > 0]
    weight = busy["duration_s"] / busy["duration_s"].sum() if len(busy) and busy["duration_s"].sum() > 0 else None
    used = 1 - rows["free"] / rows["capacity_slots"]
    return {"running_mean": float((busy["num_held"] * weight).sum()) if weight is not None else None,
            "running_max": float(rows["num_held"].max()),
            "waiting_mean": float((busy["num_waiting"] * weight).sum()) if weight is not None else None,
            "kv_usage_max": float(used.max()), "preemptions": float(rows["preempted"].sum()),
            "samples": int(len(rows))}


def slug(row: Row) -> str:
    return row.name.replace(" (", "_").replace(")", "").replace(" ", "_").lower()


def spread(runs: list[dict], keys=FIGURES) -> dict:
    """Each figure's mean over the rounds' runs, and its min and max as KEY_min and KEY_max."""
    entry = {}
    for key in keys:
        values = [r[key] for r in runs]
        entry[key] = sum(values) / len(values)
        entry[f"{key}_min"], entry[f"{key}_max"] = min(values), max(values)
    return entry


def table(results: dict[str, list[dict]], rounds: int) -> tuple[list[dict], list[dict]]:
    """Per row: mean and min-max of each figure over the rounds; per engine: the paired HTTP / in-process
    throughput ratios."""
    rows = []
    for row in ROWS:
        runs = results.get(row.name, [])
        if runs:
            rows.append({"row": row.name, "rounds": len(runs), **spread(runs)})
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


SCHEDULE_FIGURES = ("running_mean", "running_max", "waiting_mean", "kv_usage_max", "preemptions")


def schedule_rows(results: dict[str, list[dict]]) -> list[dict]:
    """Per row that has one (servers from /metrics, our in-process engines from their records): the mean and
    min-max over the rounds of each schedule figure."""
    out = []
    for row in ROWS:
        runs = [r["schedule"] for r in results.get(row.name, []) if r.get("schedule")]
        if not runs:
            continue
        source = "/metrics" if row.http else "sim record" if row.sim else "record"
        entry = {"row": row.name, "source": source, "rounds": len(runs)}
        for key in SCHEDULE_FIGURES:
            values = [r[key] for r in runs if r.get(key) is not None]
            entry[key] = sum(values) / len(values) if values else None
            entry[f"{key}_min"] = min(values) if values else None
            entry[f"{key}_max"] = max(values) if values else None
        out.append(entry)
    return out


def versus_vllm(results: dict[str, list[dict]]) -> dict | None:
    """Our paged engine over HTTP against vLLM over HTTP: output tok/s ours / vLLM's, paired by round."""
    ours, theirs = results.get(OURS_BESIDE_VLLM, []), results.get("vllm (HTTP)", [])
    pairs = [a["output_tokens_per_s"] / b["output_tokens_per_s"] for a, b in zip(ours, theirs)]
    if not pairs:
        return None
    return {"ours_over_vllm": sum(pairs) / len(pairs), "min": min(pairs), "max": max(pairs), "pairs": len(pairs)}


def markdown(rows: list[dict], overhead: list[dict], command: str, schedule: list[dict] | None = None,
             vs: dict | None = None, greedy: dict | None = None, setting: dict | None = None) -> str:
    lines = [f"`{command}`", ""]
    if setting:
        threads = setting["threads"] if setting.get("threads") is not None else "each one's default"
        lines += [f"Model {setting['model']}, KV {setting['kv_mib']} MiB, block size {setting['block_size']} "
                  f"({setting.get('vllm_block_size', VLLM_BLOCK)} for vLLM and the rows beside it), "
                  f"model threads {threads}, at most {setting['max_num_seqs']} sequences and "
                  f"{setting['max_num_batched_tokens']} batched tokens.", ""]
    lines += ["| row | output tok/s (min-max) | TTFT mean s | TPOT mean s | end-to-end mean s | "
              "wall s | rounds |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['row']} | {r['output_tokens_per_s']:.1f} ({r['output_tokens_per_s_min']:.1f}-"
                     f"{r['output_tokens_per_s_max']:.1f}) | {r['ttft_s_mean']:.2f} | {r['tpot_s_mean']:.4f} | "
                     f"{r['e2e_latency_s_mean']:.2f} | {r['wall_s']:.0f} | {r['rounds']} |")
    lines += ["", "| engine | HTTP / in-process output tok/s, paired by round (min-max) |", "|---|---|"]
    lines += [f"| {o['engine'].replace('_', '-')} | {o['http_over_in_process']:.2f} ({o['min']:.2f}-{o['max']:.2f}), "
              f"{o['pairs']} pairs |" for o in overhead]
    if vs:
        lines += ["", f"Our paged server / vLLM, output tok/s paired by round: {vs['ours_over_vllm']:.2f} "
                  f"({vs['min']:.2f}-{vs['max']:.2f}), {vs['pairs']} pairs."]
    if greedy:
        lines += ["", f"Greedy tokens, vLLM against our paged server, on {greedy['prompts']} prompts: "
                  f"{greedy['prompts_equal']} equal throughout, {greedy['tokens_equal_before_a_difference']} of "
                  f"{greedy['tokens']} tokens equal up to each prompt's first difference."]
    if schedule:
        lines += ["", "| row | from | running mean | running peak | waiting mean | KV usage peak | preemptions |"
                  " rounds |", "|---|---|---|---|---|---|---|---|"]
        lines += ["| " + " | ".join(schedule_cells(e)) + " |" for e in schedule]
    return "\n".join(lines) + "\n"


def greedy_prompts(folder: Path, count: int = GREEDY_PROMPTS, longest: int = 256) -> list[list[int]]:
    """The first `count` ShareGPT prompts in the model's own tokens, each cut to `longest` tokens."""
    from pagedbench.workloads.sharegpt import load_sharegpt
    from pagedbench.workloads.tokenizer import load_tokenizer

    pairs = load_sharegpt(None, load_tokenizer(f"hf:{folder}"))
    offsets = pairs.prompt_offsets
    return [[int(t) for t in pairs.prompt_ids[offsets[i]:offsets[i + 1]][:longest]]
            for i in range(min(count, len(pairs.output_lens)))]


def chosen_rows(only: list[str] | None, setup: Setup) -> tuple[list[Row], list[str]]:
    """The rows this study runs, and why each row it leaves out is left out (or a SystemExit for a row that
    was asked for by name and cannot run)."""
    chosen, notes = [], []
    for row in ROWS:
        why = None
        if row.engine == "transformers" and setup.model != MODEL:
            why = f"transformers' continuous batching cannot run {setup.model}"
        elif row.engine == "vllm" and setup.vllm is None:
            why = "vLLM's environment is not built (make vllm-env)"
        elif row in BESIDE_VLLM and setup.vllm is None and only is None:
            why = "it runs beside vLLM, whose environment is not built (make vllm-env)"
        if only is not None and row.name not in only:
            continue
        if why is None:
            chosen.append(row)
        elif only is not None:
            raise SystemExit(f"error: {row.name} cannot run: {why}")
        else:
            notes.append(f"{row.name}: not run, {why}")
    return chosen, notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.studies.peers", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the model, every run and the table")
    parser.add_argument("--rounds", type=int, default=2, help="times each row runs, interleaved (default 2)")
    parser.add_argument("--requests", type=int, default=24, help="ShareGPT requests of the trace (default 24)")
    parser.add_argument("--max-output-len", type=int, default=128,
                        help="cap on each request's output tokens (default 128; 0: the trace's own lengths)")
    parser.add_argument("--rate", type=float, default=None, help="Poisson arrivals (req/s); default: all at t = 0")
    parser.add_argument("--only", nargs="*", default=None, help="row names to run (default: all that can)")
    parser.add_argument("--seed", type=int, default=0, help="seeds each round's row order")
    parser.add_argument("--model", choices=MODELS, default=MODEL, help=f"the model of every row (default {MODEL})")
    parser.add_argument("--block-size", type=int, default=BLOCK,
                        help=f"block size of our paged engine and transformers' pages (default {BLOCK}; the rows "
                             f"beside vLLM use its {VLLM_BLOCK})")
    parser.add_argument("--threads", type=int, default=None,
                        help="model threads of every row (default: each one's own; vLLM's CPU worker binds cores)")
    parser.add_argument("--vllm-venv", type=Path, default=VLLM_VENV, help="vLLM's environment (make vllm-env)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.requests < 1:
        parser.error("--rounds and --requests must be >= 1")
    if args.block_size < 1 or args.block_size & (args.block_size - 1):
        parser.error("--block-size must be a power of two")
    if args.threads is not None and not 1 <= args.threads <= (os.cpu_count() or 1):
        parser.error(f"--threads must be between 1 and this machine's {os.cpu_count()} cores")
    if args.only is not None and (unknown := set(args.only) - {r.name for r in ROWS}):
        parser.error(f"--only: no row {sorted(unknown)}; rows: {[r.name for r in ROWS]}")
    setup = Setup(args.model, args.block_size, args.threads, vllm_command(args.vllm_venv))
    chosen, notes = chosen_rows(args.only, setup)
    for note in notes:
        print(note, flush=True)
    if not chosen:
        parser.error("no row to run")
    args.out.mkdir(parents=True, exist_ok=True)
    folder = model_dir(args.out, args.model)
    base = trace_args(folder, args.requests, args.rate, args.max_output_len, args.model)
    compare = {"vllm (HTTP)", OURS_BESIDE_VLLM} <= {r.name for r in chosen}
    prompts = greedy_prompts(folder) if compare else None
    results: dict[str, list[dict]] = {}
    order_rng = random.Random(args.seed)
    for rnd in range(args.rounds):
        order = chosen[:]
        order_rng.shuffle(order)
        for row in order:
            print(f"round {rnd + 1}/{args.rounds}: {row.name}", flush=True)
            ask = prompts if rnd == 0 and row.name in ("vllm (HTTP)", OURS_BESIDE_VLLM) else None
            figures = run_row(row, folder, base, args.out / f"round{rnd}" / slug(row), setup, ask)
            results.setdefault(row.name, []).append(figures)
            print(f"  {figures['output_tokens_per_s']:.1f} output tok/s, {figures['wall_s']:.1f} s", flush=True)
    rows, overhead = table(results, args.rounds)
    schedule = schedule_rows(results)
    vs = versus_vllm(results)
    greedy = agreement(results[OURS_BESIDE_VLLM][0]["greedy"], results["vllm (HTTP)"][0]["greedy"]) \
        if compare else None
    command = "python -m pagedbench.studies.peers " + " ".join(argv if argv is not None else sys.argv[1:])
    setting = {"model": args.model, "block_size": args.block_size, "vllm_block_size": VLLM_BLOCK,
               "sim_hardware": sim_hardware(args.model),
               "threads": args.threads, "kv_mib": KV_MIB,
               "max_num_seqs": MAX_NUM_SEQS, "max_num_batched_tokens": MAX_BATCH_TOKENS}
    (args.out / "peers.json").write_text(json.dumps({"command": command, "requests": args.requests,
                                                     "max_output_len": args.max_output_len,
                                                     "rate": args.rate, "rounds": args.rounds, "setting": setting,
                                                     "rows": rows, "overhead": overhead, "schedule": schedule,
                                                     "versus_vllm": vs, "greedy": greedy, "not_run": notes,
                                                     "runs": results}, indent=2) + "\n")
    text = markdown(rows, overhead, command, schedule, vs, greedy, setting)
    (args.out / "peers.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
