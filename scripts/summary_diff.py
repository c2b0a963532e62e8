"""Compare the run folders of two trees key by key: every summary key, and both tables cell by cell.

    python scripts/summary_diff.py BEFORE AFTER [--rel 0]

BEFORE and AFTER are folders of run folders (one per case, same names). Keys that depend on the machine
rather than the run (`wall_s`, `iterations_per_wall_s`, `metadata`) are left out. Exit 1 on any difference
(`--rel`: the relative tolerance for floats; 0 = equal to the bit), listing each.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
import sys

import numpy as np
import pandas as pd

MACHINE_KEYS = {"wall_s", "iterations_per_wall_s", "metadata"}
TABLES = ("iterations.parquet", "requests.parquet")


def same(a, b, rel: float) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) and math.isnan(b):
            return True
        return a == b or (rel > 0 and math.isclose(a, b, rel_tol=rel, abs_tol=0.0))
    return a == b


def same_cell(u, v) -> bool:
    """Cells equal to the bit: arrays element by element (their repr elides the middle), NA equal to NA."""
    if isinstance(u, np.ndarray) or isinstance(v, np.ndarray):
        return isinstance(u, np.ndarray) and isinstance(v, np.ndarray) and np.array_equal(u, v, equal_nan=True)
    return repr(u) == repr(v)


def diff_summaries(a: dict, b: dict, rel: float) -> list[str]:
    keys = (set(a) | set(b)) - MACHINE_KEYS
    return [f"{k}: {a.get(k, '<missing>')!r} -> {b.get(k, '<missing>')!r}" for k in sorted(keys)
            if not same(a.get(k), b.get(k), rel)]


def diff_table(a: pd.DataFrame, b: pd.DataFrame, rel: float) -> list[str]:
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return [f"shape or columns differ: {a.shape} {list(a.columns)} -> {b.shape} {list(b.columns)}"]
    out = []
    for column in a.columns:
        x, y = a[column], b[column]
        if x.dtype.kind == "f" and rel > 0:
            equal = (((x - y).abs() <= rel * y.abs()) | (x.isna() & y.isna())).reset_index(drop=True)
        else:
            equal = pd.Series([same_cell(u, v) for u, v in zip(x.tolist(), y.tolist())])
        if not equal.all():
            first = int((~equal).to_numpy().argmax())
            out.append(f"{column}: {int((~equal).sum())} rows differ, first row {first}: {x.iloc[first]!r} -> "
                       f"{y.iloc[first]!r}")
    return out


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
