"""`pagedbench bench`: any OpenAI-compatible server measured as `vllm bench serve` measures it, with its flags.

The flags (vLLM's names) become the overrides of a run with `backend=http` (conf/backend/http.yaml), which the
run command executes (`pagedbench.cli.script`); pagedbench/cli.py's docstring lists them. Beside the run, this
module waits for the server to answer (`--ready-check-timeout-sec`), writes a ramped queue
(`--ramp-up-strategy`) as a trace file, prints vLLM's result block from the run's vllm_result.json (so the
console and the JSON say the same), and saves that JSON as vLLM does (`--save-result`, `--append-result`,
`--metadata`).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
from pathlib import Path
import re
import shutil
import sys
import time

ENDPOINTS = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}
BACKENDS = {"openai": "/v1/completions", "vllm": "/v1/completions", "openai-chat": "/v1/chat/completions"}
DATASETS = ("random", "sharegpt")
GOODPUT = {"ttft": "ttft_s", "tpot": "tpot_s", "e2el": "e2e_latency_s"}    # vLLM's keys -> measure.slo's
METRICS = ("ttft", "tpot", "itl", "e2el")
VLLM_RESULT = "vllm_result.json"
BENCH_DIR = "outputs/bench"
READ_TIMEOUT_S = 6 * 3600     # vLLM's client gives a request six hours (AIOHTTP_TIMEOUT); ours is per read
# vLLM's sampling flags, each sent in the request body under its own key when given.
SAMPLING = {"top_p": float, "top_k": int, "min_p": float, "repetition_penalty": float,
            "frequency_penalty": float, "presence_penalty": float}
RAMPS = ("linear", "exponential")


def script(name: str, args: list[str]) -> int:
    """The run or serve command (pagedbench.run.entry, pagedbench.serve.entry) with `args`, as `python NAME.py
    ARGS` runs it; its exit status (Hydra's own exit on a bad argument included)."""
    if name == "run":
        from pagedbench.run import entry
    else:
        from pagedbench.serve import entry
    try:
        return entry(args)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)



def bench_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pagedbench bench", description="Measure an OpenAI-compatible server as "
                                "`vllm bench serve` does (its flag names), as a run with backend=http.",
                                epilog="After `--`: more Hydra overrides of the run (conf/backend/http.yaml).")
    p.add_argument("--base-url", help="the server's root, e.g. http://127.0.0.1:8000 (else --host and --port)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--backend", "--endpoint-type", dest="backend", choices=sorted(BACKENDS), default="openai")
    p.add_argument("--endpoint", choices=sorted(ENDPOINTS), help="default: the --backend's")
    p.add_argument("--model", help="the model to ask for (default: the first the server lists)")
    p.add_argument("--tokenizer", help="a tokenizer spec (cl100k_base, hf:/dir): the trace's, and the one that "
                                       "decodes prompts to text for chat (default cl100k_base)")
    p.add_argument("--dataset-name", choices=DATASETS, default="random")
    p.add_argument("--dataset-path", help="sharegpt: a ShareGPT JSON file (default: the packaged one)")
    p.add_argument("--num-prompts", type=int, default=1000)
    p.add_argument("--input-len", type=int, help="random: the prompt length (as --random-input-len)")
    p.add_argument("--output-len", type=int, help="random: the output length (as --random-output-len)")
    p.add_argument("--random-input-len", type=int, default=1024)
    p.add_argument("--random-output-len", type=int, default=128)
    p.add_argument("--random-range-ratio", type=float, default=0.0,
                   help="random: lengths uniform in [len x (1 - r), len x (1 + r)]")
    p.add_argument("--request-rate", type=float, default=math.inf, help="requests/s (inf: all at once)")
    p.add_argument("--burstiness", type=float, default=1.0, help="gamma shape of the gaps (1: Poisson)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-concurrency", type=int, help="requests in flight at most (the rest wait in the client)")
    p.add_argument("--metric-percentiles", help="comma-separated percentiles (default: measure.percentiles)")
    p.add_argument("--percentile-metrics", help=f"accepted for vLLM's scripts: {','.join(METRICS)} are always "
                                                f"written")
    p.add_argument("--goodput", nargs="+", metavar="KEY:MS", help=f"SLO bounds in ms ({', '.join(GOODPUT)})")
    p.add_argument("--save-result", action="store_true", help="copy vllm_result.json to --result-dir")
    p.add_argument("--save-detailed", action="store_true", help="with the per-request lists")
    p.add_argument("--result-dir", type=Path, default=Path("."))
    p.add_argument("--result-filename", help="default: vLLM's name (label, rate, concurrency, model, date)")
    p.add_argument("--label", help="the result file's name prefix (default: the endpoint type)")
    p.add_argument("--served-model-name", help="the model name sent in every request (default: --model)")
    p.add_argument("--header", nargs="+", metavar="KEY=VALUE", help="more headers on every request")
    p.add_argument("--extra-body", metavar="JSON", help="a JSON object merged into every request body")
    p.add_argument("--temperature", type=float, help="sampling temperature (default 0: greedy)")
    for key, kind in SAMPLING.items():
        p.add_argument(f"--{key.replace('_', '-')}", type=kind, help=f"sent as {key} in every request body")
    p.add_argument("--num-warmups", type=int, default=0, help="requests sent before the clock starts, not counted")
    p.add_argument("--ramp-up-strategy", choices=RAMPS, help="ramp the request rate from --ramp-up-start-rps to "
                   "--ramp-up-end-rps over the requests (instead of --request-rate)")
    p.add_argument("--ramp-up-start-rps", type=float)
    p.add_argument("--ramp-up-end-rps", type=float)
    p.add_argument("--metadata", nargs="+", metavar="KEY=VALUE", help="written into the saved result")
    p.add_argument("--append-result", action="store_true", help="append the result to an existing file (one JSON "
                   "object a line)")
    p.add_argument("--ready-check-timeout-sec", type=int, default=600,
                   help="wait this long for the server to answer GET /v1/models before starting (0: no check)")
    return p


def hydra_value(value) -> str:
    """A JSON value written in Hydra's override grammar (strings quoted, mappings and lists nested)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):   # Hydra keeps a backslash as it is, unless a quote or the end follows it
        escaped = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, value)
        return "'" + escaped.replace("'", "\\'") + "'"
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        for key in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", str(key)):
                raise ValueError(f"key {key!r}: a key of letters, digits, _ and - is needed")
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"{value!r} is not a JSON value")


def key_values(items: list[str] | None, flag: str, parser: argparse.ArgumentParser) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"{flag} {item!r}: write KEY=VALUE")
        out[key] = value
    return out


def request_body(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict:
    """--extra-body merged with the sampling flags given."""
    body = {}
    if args.extra_body:
        try:
            body = json.loads(args.extra_body)
        except ValueError as err:
            parser.error(f"--extra-body is not JSON: {err}")
        if not isinstance(body, dict):
            parser.error(f"--extra-body must be a JSON object, got {args.extra_body!r}")
    for key in SAMPLING:
        if getattr(args, key) is not None:
            body[key] = getattr(args, key)
    return body


def _positive(value, flag: str, parser: argparse.ArgumentParser, zero: bool = False):
    if value is not None and (value < 0 if zero else value <= 0):
        parser.error(f"{flag} must be {'>= 0' if zero else '> 0'}, got {value:g}")


def bench_overrides(args: argparse.Namespace, parser: argparse.ArgumentParser, stamp: str) -> list[str]:
    """The Hydra overrides of the run that `bench`'s flags describe (errors through `parser`)."""
    url = args.base_url or f"http://{args.host}:{args.port}"
    endpoint = ENDPOINTS[args.endpoint or BACKENDS[args.backend]]
    out = ["backend=http", f"backend.url={url}", f"backend.endpoint={endpoint}", f"workload.seed={args.seed}",
           f"hydra.run.dir={BENCH_DIR}/{stamp}", f"backend.read_timeout_s={READ_TIMEOUT_S}"]
    if args.served_model_name or args.model:
        out.append(f"backend.model={hydra_value(args.served_model_name or args.model)}")
    headers = key_values(args.header, "--header", parser)
    body = request_body(args, parser)
    try:
        if headers:
            out.append(f"backend.headers={hydra_value(headers)}")
        if body:
            out.append(f"backend.extra_body={hydra_value(body)}")
    except ValueError as err:
        parser.error(f"--header / --extra-body: {err}")
    if args.temperature is not None:
        _positive(args.temperature, "--temperature", parser, zero=True)
        out.append(f"backend.temperature={args.temperature!r}")
    _positive(args.num_warmups, "--num-warmups", parser, zero=True)
    if args.num_warmups:
        out.append(f"backend.warmup_requests={args.num_warmups}")
    tokenizer = args.tokenizer or ("cl100k_base" if endpoint == "chat" else None)
    if tokenizer:
        out.append(f"backend.tokenizer={tokenizer}")
    for flag, value in (("--num-prompts", args.num_prompts), ("--request-rate", args.request_rate),
                        ("--burstiness", args.burstiness), ("--max-concurrency", args.max_concurrency)):
        _positive(value, flag, parser)
    _positive(args.random_range_ratio, "--random-range-ratio", parser, zero=True)
    if args.random_range_ratio >= 1:
        parser.error(f"--random-range-ratio must be < 1, got {args.random_range_ratio:g}")
    if args.dataset_name == "random":
        if args.dataset_path:
            parser.error("--dataset-path is for --dataset-name sharegpt; random makes its own prompts")
        out.append("workload=synthetic")
        for name, length in (("prompt_dist", args.input_len or args.random_input_len),
                             ("output_dist", args.output_len or args.random_output_len)):
            _positive(length, f"the {name.split('_')[0]} length", parser)
            low, high = (max(1, round(length * (1 - args.random_range_ratio))),
                         max(1, round(length * (1 + args.random_range_ratio))))
            dist = f"{{kind:fixed,value:{low}}}" if low == high else f"{{kind:uniform,low:{low},high:{high}}}"
            out += [f"~workload.{name}", f"+workload.{name}={dist}"]     # replaced whole, not merged
    else:
        if args.input_len or args.output_len:
            parser.error("--input-len / --output-len are for --dataset-name random: a ShareGPT trace keeps each "
                         "conversation's lengths (cap the outputs with -- workload.max_output_len=N)")
        out.append("workload=sharegpt")
        if args.dataset_path:
            out.append(f"workload.path={args.dataset_path}")
        if args.tokenizer:
            out.append(f"workload.tokenizer={args.tokenizer}")
    out.append(f"workload.num_requests={args.num_prompts}")
    if args.ramp_up_strategy:
        for flag, value in (("--ramp-up-start-rps", args.ramp_up_start_rps), ("--ramp-up-end-rps",
                                                                             args.ramp_up_end_rps)):
            if value is None:
                parser.error(f"--ramp-up-strategy needs {flag}")
            _positive(value, flag, parser)
        out.append("workload.arrival=offline")   # the arrivals are written by ramp_trace, then replayed
    elif math.isinf(args.request_rate):
        out.append("workload.arrival=offline")
    else:
        arrival = "poisson" if args.burstiness == 1 else "gamma"
        out += [f"workload.arrival={arrival}", f"workload.request_rate={args.request_rate:g}",
                f"workload.burstiness={args.burstiness:g}"]
    if args.max_concurrency is not None:
        out.append(f"backend.max_concurrency={args.max_concurrency}")
    if args.metric_percentiles:
        try:
            ps = [float(p) for p in args.metric_percentiles.split(",")]
        except ValueError:
            parser.error(f"--metric-percentiles must be comma-separated numbers, got {args.metric_percentiles!r}")
        if not all(0 < p <= 100 for p in ps):
            parser.error(f"--metric-percentiles must lie in (0, 100], got {args.metric_percentiles!r}")
        out.append("measure.percentiles=[" + ",".join(f"{p:g}" for p in ps) + "]")
    if args.percentile_metrics:
        unknown = set(args.percentile_metrics.split(",")) - set(METRICS)
        if unknown:
            parser.error(f"--percentile-metrics: unknown {sorted(unknown)}; {','.join(METRICS)} are written")
    slo = dict.fromkeys(GOODPUT.values())      # no --goodput: nothing bounded, request_goodput null (vLLM)
    for item in args.goodput or []:
        key, _, ms = item.partition(":")
        if key not in GOODPUT:
            parser.error(f"--goodput {item!r}: the key must be one of {', '.join(GOODPUT)}")
        try:
            bound = float(ms)
        except ValueError:
            parser.error(f"--goodput {item!r}: the value must be milliseconds, e.g. {key}:100")
        _positive(bound, f"--goodput {key}", parser)
        slo[GOODPUT[key]] = bound / 1000
    out += [f"measure.slo.{k}={'null' if v is None else repr(v)}" for k, v in slo.items()]
    if args.save_detailed:
        out.append("measure.vllm_detailed=true")
    return out


def result_filename(args: argparse.Namespace, model: str | None, stamp: str) -> str:
    """vLLM's name for a saved result: label (or endpoint type), rate, concurrency, the model's last part, date."""
    label = args.label or args.backend
    rate = "inf" if math.isinf(args.request_rate) else f"{args.request_rate:g}"
    concurrency = f"-concurrency{args.max_concurrency}" if args.max_concurrency is not None else ""
    model_part = (model or "model").rstrip("/").split("/")[-1]
    return f"{label}-{rate}qps{concurrency}-{model_part}-{stamp}.json"


def ramp_rates(strategy: str, start: float, end: float, n: int) -> list[float]:
    """Each request's rate: from `start` to `end` requests/s over `n` requests, linearly or geometrically."""
    if n <= 1:
        return [start] * n
    if strategy == "linear":
        return [start + (end - start) * i / (n - 1) for i in range(n)]
    return [start * (end / start) ** (i / (n - 1)) for i in range(n)]


def ramp_trace(args: argparse.Namespace, overrides: list[str], extra: list[str], path: Path) -> list[str]:
    """The queue the overrides describe, drawn as the run would draw it, with arrivals whose rate ramps (gaps
    drawn from a gamma of shape --burstiness, seeded by --seed), written to `path`; the overrides that
    replay it."""
    import numpy as np
    from hydra import compose, initialize_config_dir

    from pagedbench.paths import CONF
    from pagedbench.run import RunConfig
    from pagedbench.workloads import build_workload
    from pagedbench.workloads.trace_file import write_trace

    keep = [o for o in overrides + extra if not o.startswith("hydra.")]
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=keep)
    requests = build_workload(RunConfig.parse(cfg).workload)
    rates = ramp_rates(args.ramp_up_strategy, args.ramp_up_start_rps, args.ramp_up_end_rps, len(requests))
    rng = np.random.default_rng(args.seed)
    gaps = [rng.gamma(args.burstiness, 1.0 / (rate * args.burstiness)) for rate in rates]
    arrivals = np.cumsum([0.0, *gaps[1:]])
    from dataclasses import replace

    write_trace([replace(r, arrival_s=float(t)) for r, t in zip(requests, arrivals)], path, with_tokens=True)
    return ["workload=trace", f"workload.path={path.resolve()}"]


def wait_ready(url: str, headers: dict, timeout_s: int) -> str | None:
    """None once GET {url}/v1/models answers 200 (polled every second for `timeout_s`), else why not."""
    import httpx

    deadline, last = time.monotonic() + timeout_s, "no answer"
    while True:
        try:
            reply = httpx.get(f"{url}/v1/models", headers=headers, timeout=5.0)
            if reply.status_code == 200:
                return None
            last = f"HTTP {reply.status_code}"
        except httpx.HTTPError as err:
            last = f"{type(err).__name__}: {err}"
        if time.monotonic() >= deadline:
            return f"the server at {url} did not answer GET /v1/models within {timeout_s} s ({last})"
        time.sleep(1.0)


def result_block(result: dict) -> str:
    """vLLM's result block, from vllm_result.json itself (so the console and the file agree)."""
    lines = ["{s:{c}^50}".format(s=" Serving Benchmark Result ", c="=")]

    def row(name, value, fmt):
        if value is not None:
            lines.append(f"{name:<40}{value:<10{fmt}}")
    row("Successful requests:", result.get("completed"), "")
    row("Benchmark duration (s):", result.get("duration"), ".2f")
    row("Total input tokens:", result.get("total_input_tokens"), "")
    row("Total generated tokens:", result.get("total_output_tokens"), "")
    row("Request throughput (req/s):", result.get("request_throughput"), ".2f")
    row("Output token throughput (tok/s):", result.get("output_throughput"), ".2f")
    row("Total Token throughput (tok/s):", result.get("total_token_throughput"), ".2f")
    for metric, title in (("ttft", "Time to First Token"), ("tpot", "Time per Output Token (excl. 1st token)"),
                          ("itl", "Inter-token Latency"), ("e2el", "End-to-end Latency")):
        if f"mean_{metric}_ms" not in result:
            continue
        lines.append("{s:{c}^50}".format(s=f" {title} ", c="-"))
        row(f"Mean {metric.upper()} (ms):", result.get(f"mean_{metric}_ms"), ".2f")
        row(f"Median {metric.upper()} (ms):", result.get(f"median_{metric}_ms"), ".2f")
        for key in sorted(k for k in result if k.startswith("p") and k.endswith(f"_{metric}_ms")):
            row(f"P{key[1:].split('_')[0]} {metric.upper()} (ms):", result[key], ".2f")
    lines.append("=" * 50)
    return "\n".join(lines)


def save_result(result: Path, dest: Path, metadata: dict[str, str], append: bool) -> None:
    """vllm_result.json at `dest`, with `metadata` added; appended as one more line where `append`."""
    data = json.loads(result.read_text())
    data.update(metadata)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if append and dest.is_file() and dest.stat().st_size:
        with dest.open("a") as f:
            f.write("\n" + json.dumps(data))
    else:
        dest.write_text(json.dumps(data))


def bench(argv: list[str]) -> int:
    parser = bench_parser()
    ours, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = parser.parse_args(ours)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    overrides = bench_overrides(args, parser, stamp)
    metadata = key_values(args.metadata, "--metadata", parser)
    run_dir = Path(BENCH_DIR) / stamp
    url = args.base_url.rstrip("/") if args.base_url else f"http://{args.host}:{args.port}"
    if args.ready_check_timeout_sec > 0:
        key = os.environ.get("OPENAI_API_KEY")
        problem = wait_ready(url, key_values(args.header, "--header", parser) |
                             ({"Authorization": f"Bearer {key}"} if key else {}), args.ready_check_timeout_sec)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 1
    if args.ramp_up_strategy:   # beside the run's folder, which the run itself creates
        trace = Path(BENCH_DIR) / "ramps" / f"{stamp}.jsonl"
        trace.parent.mkdir(parents=True, exist_ok=True)
        overrides += ramp_trace(args, overrides, extra, trace)
    status = script("run", overrides + extra)
    if status:
        print(f"error: the benchmark did not finish (the run's folder: {run_dir})", file=sys.stderr)
        return status
    result = run_dir / VLLM_RESULT
    if result.is_file():
        print(result_block(json.loads(result.read_text())))
    if args.save_result:
        if not result.is_file():
            print(f"error: {result} was not written", file=sys.stderr)
            return 1
        model = args.served_model_name or args.model or _served_model(run_dir)
        dest = args.result_dir / (args.result_filename or result_filename(args, model, stamp))
        save_result(result, dest, metadata, args.append_result)
        print(f"saved {dest}")
    return 0


def _served_model(run_dir: Path) -> str | None:
    """The model the run asked the server for, as its vllm_result.json names it."""
    try:
        return json.loads((run_dir / VLLM_RESULT).read_text()).get("model_id")
    except (OSError, ValueError):
        return None


