"""Compare the run folders of two trees key by key: every summary key, and both tables cell by cell.

    python scripts/summary_diff.py BEFORE AFTER [--rel 0]

BEFORE and AFTER are folders of run folders (one per case, same names). Keys that depend on the machine
rather than the run (`wall_s`, `iterations_per_wall_s`, `metadata`) are left out. Exit 1 on any difference
(`--rel`: the relative tolerance for floats; 0 = equal to the bit), listing each.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
import sys

import pandas as pd

from pagedbench.results.record.compare import TABLES, diff_summaries, diff_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rel", type=float, default=0.0, help="relative tolerance for floats (0: exact)")
    args = parser.parse_args(argv)
    cases = sorted(p.name for p in args.before.iterdir() if (p / "summary.json").exists())
    if not cases:
        parser.error(f"{args.before} holds no run folder with a summary.json")
    failed = 0
    for case in cases:
        other = args.after / case
        if not (other / "summary.json").exists():
            print(f"{case}: no summary in {other}")
            failed += 1
            continue
        problems = diff_summaries(json.loads((args.before / case / "summary.json").read_text()),
                                  json.loads((other / "summary.json").read_text()), args.rel)
        for table in TABLES:
            problems += [f"{table} {p}" for p in diff_table(pd.read_parquet(args.before / case / table),
                                                            pd.read_parquet(other / table), args.rel)]
        print(f"{case}: {'equal' if not problems else f'{len(problems)} differences'}")
        for p in problems:
            print(f"  {p}")
        failed += bool(problems)
    print(f"{len(cases) - failed} of {len(cases)} cases equal")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
