"""The `pagedbench` command, installed with the package (`pip install .`, or `make install` in a checkout).

    pagedbench run [OVERRIDE ...]                      # python run.py OVERRIDE ... (Hydra; -m for a multirun)
    pagedbench serve [OVERRIDE ...]                    # python serve.py OVERRIDE ...
    pagedbench bench --base-url URL [FLAG ...] [-- OVERRIDE ...]
    pagedbench report [ARG ...]                        # python -m pagedbench.results.report.build ARG ... (a checkout)

`run` and `serve` hand their arguments to the run and serve commands unchanged (`pagedbench.run.entry`,
`pagedbench.serve.entry`, which run.py and serve.py call): the same config groups (conf/,
installed with the package), the same runs, written under the current directory (outputs/). So an installed
pagedbench runs outside a checkout:

    pagedbench run backend=sim model=opt-13b workload=sharegpt workload.num_requests=200

`bench` measures any OpenAI-compatible server (vLLM, `transformers serve`, ours: `pagedbench serve`) as
`vllm bench serve` does, taking vLLM's flag names for the common case and mapping them onto a run with
`backend=http` (conf/backend/http.yaml): `--base-url` (or `--host`/`--port`), `--backend` (openai, vllm:
/v1/completions; openai-chat: /v1/chat/completions) or `--endpoint`, `--model`, `--tokenizer` (a
pagedbench.workloads.tokenizer spec: cl100k_base, hf:/dir), `--dataset-name` (random: `--random-input-len`,
`--random-output-len`, `--random-range-ratio`, or `--input-len`/`--output-len`; sharegpt:
`--dataset-path`, default the packaged ShareGPT), `--num-prompts`, `--request-rate` (inf: all at once),
`--burstiness` (gamma arrivals when not 1), `--seed`, `--max-concurrency`, `--metric-percentiles`,
`--percentile-metrics` (ttft, tpot, itl and e2el are always written), `--goodput KEY:MS ...` (ttft, tpot,
e2el; without it `request_goodput` is null, as vLLM writes it), `--save-result`, `--save-detailed`,
`--result-dir`, `--result-filename`, `--label`. What follows `--` is more Hydra overrides
(`-- backend.read_timeout_s=300`). The run's folder (outputs/bench/...) holds every table and summary of a
run; with `--save-result` its vllm_result.json (current vLLM's schema, results/record/vllm_result.py) is
copied to `--result-dir` under vLLM's file name. The differences from vLLM: the prompts are the trace's
token ids (`-- backend.prompt=text` sends text), `ignore_eos` is sent unless `-- backend.ignore_eos=false`
(each request should produce its trace's output length), and a request's TTFT counts from when our client
sent it, its wait under `--max-concurrency` reported apart (`queue_times`), as vLLM's.
"""
from __future__ import annotations

import argparse
import datetime
import math
from pathlib import Path
import shutil
import sys


COMMANDS = ("run", "serve", "bench", "report")
ENDPOINTS = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}
BACKENDS = {"openai": "/v1/completions", "vllm": "/v1/completions", "openai-chat": "/v1/chat/completions"}
DATASETS = ("random", "sharegpt")
GOODPUT = {"ttft": "ttft_s", "tpot": "tpot_s", "e2el": "e2e_latency_s"}    # vLLM's keys -> measure.slo's
METRICS = ("ttft", "tpot", "itl", "e2el")
VLLM_RESULT = "vllm_result.json"
BENCH_DIR = "outputs/bench"


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
    return p


def _positive(value, flag: str, parser: argparse.ArgumentParser, zero: bool = False):
    if value is not None and (value < 0 if zero else value <= 0):
        parser.error(f"{flag} must be {'>= 0' if zero else '> 0'}, got {value:g}")


def bench_overrides(args: argparse.Namespace, parser: argparse.ArgumentParser, stamp: str) -> list[str]:
    """The Hydra overrides of the run that `bench`'s flags describe (errors through `parser`)."""
    url = args.base_url or f"http://{args.host}:{args.port}"
    endpoint = ENDPOINTS[args.endpoint or BACKENDS[args.backend]]
    out = ["backend=http", f"backend.url={url}", f"backend.endpoint={endpoint}", f"workload.seed={args.seed}",
           f"hydra.run.dir={BENCH_DIR}/{stamp}"]
    if args.model:
        out.append(f"backend.model={args.model}")
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
    if math.isinf(args.request_rate):
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


def bench(argv: list[str]) -> int:
    parser = bench_parser()
    ours, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = parser.parse_args(ours)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    overrides = bench_overrides(args, parser, stamp)
    status = script("run", overrides + extra)
    run_dir = Path(BENCH_DIR) / stamp
    if status:
        print(f"error: the benchmark did not finish (the run's folder: {run_dir})", file=sys.stderr)
        return status
    result = run_dir / VLLM_RESULT
    if args.save_result:
        if not result.is_file():
            print(f"error: {result} was not written", file=sys.stderr)
            return 1
        model = args.model or _served_model(run_dir)
        dest = args.result_dir / (args.result_filename or result_filename(args, model, stamp))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(result, dest)
        print(f"saved {dest}")
    return 0


def _served_model(run_dir: Path) -> str | None:
    """The model the run asked the server for, as its vllm_result.json names it."""
    import json

    try:
        return json.loads((run_dir / VLLM_RESULT).read_text()).get("model_id")
    except (OSError, ValueError):
        return None


def report(argv: list[str]) -> int:
    from pagedbench.results.report.build import main as build

    return build(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__ if argv else "usage:\n" + __doc__.split("\n\n")[1], file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"error: unknown command {command!r}; one of: {', '.join(COMMANDS)} (pagedbench --help)",
              file=sys.stderr)
        return 2
    if command == "bench":
        return bench(rest)
    if command == "report":
        return report(rest)
    return script(command, rest)
