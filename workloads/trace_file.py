"""Trace files: any workload's requests written to a file, and a file replayed as a workload.

    python -m workloads.write_trace OUT.jsonl sharegpt arrival=poisson request_rate=2 duration_s=600
    python run.py workload=trace workload.path=OUT.jsonl workload.arrival=trace   # replay it exactly

A trace file is JSON Lines (`.jsonl`, one object a line) or Parquet
(`.parquet`), one row per request with the columns `prompt_len` and
`output_len` (positive integers), optionally `arrival_s` (seconds, >= 0)
and `prompt_token_ids` (a list of ints). `workload=trace` reads one:

- `arrival=trace` replays it: every row in arrival order at its own
  `arrival_s`, which must be present; `num_requests` and `duration_s` are
  not used;
- any other arrival treats its rows as a pool of (prompt, output) pairs,
  exactly as a dataset's: filtered, drawn in seeded permutations, with new
  arrival times.

Rows without token ids get seeded random ones (throughput depends on
lengths, not on what the tokens say), so a file of lengths alone serves the
real backend too.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pandas as pd

from workloads.pairs import TokenizedPairs
from workloads.request import Request
from workloads.synthetic import VOCAB_SIZE

SUFFIXES = (".jsonl", ".parquet")
COLUMNS = ("prompt_len", "output_len", "arrival_s", "prompt_token_ids")

log = logging.getLogger("workloads")


def trace_frame(requests: list[Request], with_tokens: bool = False) -> pd.DataFrame:
    """One row per request, in id order."""
    rows = {"prompt_len": [r.prompt_len for r in requests], "output_len": [r.output_len for r in requests],
            "arrival_s": [r.arrival_s for r in requests]}
    if with_tokens:
        rows["prompt_token_ids"] = [list(r.prompt_token_ids) for r in requests]
    return pd.DataFrame(rows)


def write_trace(requests: list[Request], path: str | Path, with_tokens: bool = False) -> Path:
    """Write `requests` as a trace file (the format follows the suffix), atomically; returns the path."""
    path = Path(path)
    _check_suffix(path)
    df = trace_frame(requests, with_tokens)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        if path.suffix == ".parquet":
            df.to_parquet(tmp, index=False)
        else:
            df.to_json(tmp, orient="records", lines=True)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _check_suffix(path: Path) -> None:
    if path.suffix not in SUFFIXES:
        raise ValueError(f"{path}: a trace file ends in {' or '.join(SUFFIXES)}")


def read_trace(path: str | Path) -> pd.DataFrame:
    """The file's rows, checked: positive integer lengths, arrivals >= 0 where given."""
    path = Path(path)
    _check_suffix(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such trace file")
    try:
        df = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_json(path, lines=True)
    except (ValueError, OSError) as err:
        raise ValueError(f"{path}: not a readable trace file ({str(err).splitlines()[0]})") from None
    unknown = sorted(set(df.columns) - set(COLUMNS))
    if unknown:
        raise ValueError(f"{path}: unknown column(s) {unknown}; a trace file has {list(COLUMNS)}")
    for col in ("prompt_len", "output_len"):
        if col not in df:
            raise ValueError(f"{path}: needs a {col!r} column")
        values = pd.to_numeric(df[col], errors="coerce")
        if values.isna().any() or (values % 1 != 0).any() or (values < 1).any():
            raise ValueError(f"{path}: {col} must be a positive integer on every row")
        df[col] = values.astype(np.int64)
    if not len(df):
        raise ValueError(f"{path}: the trace is empty")
    if "arrival_s" in df:
        arrivals = pd.to_numeric(df["arrival_s"], errors="coerce")
        if arrivals.isna().any() or (arrivals < 0).any() or not np.isfinite(arrivals).all():
            raise ValueError(f"{path}: arrival_s must be a finite number >= 0 on every row")
        df["arrival_s"] = arrivals.astype(np.float64)
    if "prompt_token_ids" in df:
        bad = [i for i, (ids, n) in enumerate(zip(df["prompt_token_ids"], df["prompt_len"])) if len(ids) != n]
        if bad:
            raise ValueError(f"{path}: row {bad[0]}: prompt_token_ids has {len(df['prompt_token_ids'][bad[0]])} "
                             f"ids but prompt_len is {df['prompt_len'][bad[0]]}")
    return df


def trace_pairs(df: pd.DataFrame, rng: np.random.Generator) -> TokenizedPairs:
    """The rows as (prompt ids, output length) pairs; random ids from `rng` where the file has none."""
    lens = df["prompt_len"].to_numpy()
    offsets = np.zeros(len(df) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    if "prompt_token_ids" in df:
        ids = np.fromiter((t for row in df["prompt_token_ids"] for t in row), dtype=np.int32, count=int(offsets[-1]))
    else:
        ids = rng.integers(0, VOCAB_SIZE, size=int(offsets[-1]), dtype=np.int32)
    return TokenizedPairs(ids, offsets, df["output_len"].to_numpy(dtype=np.int32))


def replay(df: pd.DataFrame, pairs: TokenizedPairs, path: str) -> list[Request]:
    """Every row at its own arrival time, ids 0..n-1 in arrival order (ties keep file order)."""
    if "arrival_s" not in df:
        raise ValueError(f"{path}: arrival=trace replays the file's arrival_s column, which it lacks; "
                         "use arrival=offline, poisson or gamma to draw its pairs with new arrivals")
    order = np.argsort(df["arrival_s"].to_numpy(), kind="stable")
    arrivals = df["arrival_s"].to_numpy()
    return [Request(id=i, arrival_s=float(arrivals[j]), prompt_token_ids=pairs.prompt(int(j)),
                    output_len=int(pairs.output_lens[j]), pair_index=int(j)) for i, j in enumerate(order)]
