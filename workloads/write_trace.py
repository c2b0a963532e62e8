"""Write any workload's trace to a trace file (see workloads/trace_file.py for the format).

    python -m workloads.write_trace OUT.jsonl sharegpt arrival=poisson request_rate=2 duration_s=600
    python -m workloads.write_trace OUT.parquet alpaca num_requests=500 --with-tokens

The workload is named and overridden as for `python -m workloads.stats`;
`--with-tokens` also writes each prompt's token ids (otherwise lengths and
arrival times only). Replay with `python run.py workload=trace
workload.path=OUT.jsonl` (the file's own arrival times).
"""
from __future__ import annotations

import logging
import math
from pathlib import Path
import sys

from workloads.build import build_workload
from workloads.stats import parse_workload
from workloads.trace_file import SUFFIXES, write_trace


def main(argv: list[str]) -> int:
    """Exit status: 0 written, 2 bad command line or config, 1 the trace could not be built or written."""
    with_tokens = "--with-tokens" in argv
    argv = [a for a in argv if a != "--with-tokens"]
    if len(argv) < 2 or "=" in argv[0] or "=" in argv[1]:
        print("usage: python -m workloads.write_trace OUT.jsonl|OUT.parquet NAME [key=value ...] [--with-tokens]",
              file=sys.stderr)
        return 2
    out = Path(argv[0])
    if out.suffix not in SUFFIXES:
        print(f"error: {out}: a trace file ends in {' or '.join(SUFFIXES)}", file=sys.stderr)
        return 2
    cfg = parse_workload(argv[1:])
    if isinstance(cfg, int):
        return cfg
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
    sys.exit(main(sys.argv[1:]))
