"""Write any workload's trace to a trace file (see workloads/trace_file.py for the format).

    python -m pagedbench.workloads.write_trace OUT.jsonl sharegpt arrival=poisson request_rate=2 duration_s=600
    python -m pagedbench.workloads.write_trace OUT.parquet alpaca num_requests=500 --with-tokens

The workload is named and overridden as for `python -m pagedbench.workloads.stats`;
`--with-tokens` also writes each prompt's token ids (otherwise lengths and
arrival times only). Replay with `python run.py workload=trace
workload.path=OUT.jsonl` (the file's own arrival times).
"""
from __future__ import annotations

import logging
import math
from pathlib import Path
import sys

from pagedbench.workloads.build import build_workload
from pagedbench.workloads.stats import OneLineParser, UsageError, add_workload_arguments, parse_workload
from pagedbench.workloads.trace_file import SUFFIXES, write_trace


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 written, 2 bad command line or config, 1 the trace could not be built or written."""
    parser = OneLineParser(prog="python -m pagedbench.workloads.write_trace", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, metavar="OUT", help=f"the trace file to write ({' or '.join(SUFFIXES)})")
    add_workload_arguments(parser)
    parser.add_argument("--with-tokens", action="store_true", help="also write each prompt's token ids")
    try:
        args = parser.parse_args(argv)
        out = args.out
        if out.suffix not in SUFFIXES:
            print(f"error: {out}: a trace file ends in {' or '.join(SUFFIXES)}", file=sys.stderr)
            return 2
        cfg = parse_workload(args.workload, args.overrides)
    except UsageError:
        return 2
    with_tokens = args.with_tokens
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        requests = build_workload(cfg)
        write_trace(requests, out, with_tokens)
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    span = requests[-1].arrival_s - requests[0].arrival_s
    print(f"wrote {len(requests)} requests of {cfg.label} to {out}"
          + (f" (arrivals over {span:.1f} s)" if span > 0 and math.isfinite(span) else " (all at t=0)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
