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

import sys

from pagedbench.bench import BENCH_DIR, bench, bench_overrides, bench_parser, result_filename, script  # noqa: F401


COMMANDS = ("run", "serve", "bench", "report")


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
