"""Trace files: any workload's requests written to a file, and a file replayed as a workload.

    python -m workloads.write_trace OUT.jsonl sharegpt arrival=poisson request_rate=2 duration_s=600
    python run.py workload=trace workload.path=OUT.jsonl workload.arrival=trace   # replay it exactly

A trace file is JSON Lines (`.jsonl`, one object a line) or Parquet
(`.parquet`), one row per request with the columns `prompt_len` and
`output_len` (positive integers), optionally `arrival_s` (seconds, >= 0),
`prompt_token_ids` (a list of ints), `n` and `beam_width` (positive
integers, not both above 1 on a row; absent: the config's `n` and
`beam_width`) and, together, `prefix_id` (an integer >= 0, or null for no
shared prefix) and `prefix_len` (0 on rows without one; otherwise the same
for every row of a prefix_id and shorter than the prompt). A written trace
has the sampling columns when some request samples n > 1 or beams, and the
prefix columns when some request has a shared prefix. `workload=trace`
reads one:

- `arrival=trace` replays it: every row in arrival order at its own
  `arrival_s`, which must be present; `num_requests` and `duration_s` are
  not used;
- any other arrival treats its rows as a pool of (prompt, output) pairs,
  exactly as a dataset's: filtered, drawn in seeded permutations, with new
  arrival times.

Rows without token ids get seeded random ones (throughput depends on
lengths, not on what the tokens say), so a file of lengths alone serves the
real backend too; the rows of one prefix_id then share that prefix's ids
(`shared_prefix_ids` of the config's seed), as a generated trace's do.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pandas as pd

from workloads.pairs import TokenizedPairs
from workloads.request import Request
from workloads.synthetic import VOCAB_SIZE, shared_prefix_ids

SUFFIXES = (".jsonl", ".parquet")
COLUMNS = ("prompt_len", "output_len", "arrival_s", "prompt_token_ids", "n", "beam_width", "prefix_id", "prefix_len")

log = logging.getLogger("workloads")


def trace_frame(requests: list[Request], with_tokens: bool = False) -> pd.DataFrame:
    """One row per request, in id order."""
    rows = {"prompt_len": [r.prompt_len for r in requests], "output_len": [r.output_len for r in requests],
            "arrival_s": [r.arrival_s for r in requests]}
    if with_tokens:
        rows["prompt_token_ids"] = [list(r.prompt_token_ids) for r in requests]
    if any(r.n != 1 or r.beam_width != 1 for r in requests):
        rows["n"] = [r.n for r in requests]
        rows["beam_width"] = [r.beam_width for r in requests]
    if any(r.prefix_id is not None for r in requests):
        rows["prefix_id"] = pd.array([r.prefix_id for r in requests], dtype="Int64")   # null: no prefix
        rows["prefix_len"] = [r.prefix_len for r in requests]
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
        _integers(df, col, path, minimum=1)
    for col in ("n", "beam_width"):
        if col in df:
            _integers(df, col, path, minimum=1)
    if "n" in df and "beam_width" in df:
        both = np.flatnonzero((df["n"] > 1) & (df["beam_width"] > 1))
        if len(both):
            raise ValueError(f"{path}: row {both[0]}: a request is either parallel sampling (n > 1) or beam "
                             "search (beam_width > 1), not both")
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
    if ("prefix_id" in df) != ("prefix_len" in df):
        raise ValueError(f"{path}: prefix_id and prefix_len go together: give both columns or neither")
    if "prefix_id" in df:
        _check_prefixes(df, path)
    return df


def _integers(df: pd.DataFrame, col: str, path: Path, minimum: int) -> None:
    """Checks that `col` holds integers >= minimum on every row and makes it int64."""
    values = pd.to_numeric(df[col], errors="coerce")
    if values.isna().any() or (values % 1 != 0).any() or (values < minimum).any():
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{path}: {col} must be {kind} on every row")
    df[col] = values.astype(np.int64)


def _check_prefixes(df: pd.DataFrame, path: Path) -> None:
    """Checks the prefix columns and makes prefix_id int64, -1 on rows without a prefix."""
    missing = df["prefix_id"].isna().to_numpy()
    ids = pd.to_numeric(df["prefix_id"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    if np.any(np.isnan(ids) & ~missing) or np.any((ids[~missing] % 1 != 0) | (ids[~missing] < 0)):
        raise ValueError(f"{path}: prefix_id must be an integer >= 0, or null for no shared prefix, on every row")
    df["prefix_id"] = np.where(missing, -1, np.nan_to_num(ids, nan=-1)).astype(np.int64)
    _integers(df, "prefix_len", path, minimum=0)
    ids, lens = df["prefix_id"].to_numpy(), df["prefix_len"].to_numpy()
    bad = np.flatnonzero((ids >= 0) != (lens > 0))
    if len(bad):
        got = ids[bad[0]] if ids[bad[0]] >= 0 else "null"
        raise ValueError(f"{path}: row {bad[0]}: a row with a prefix_id needs a prefix_len > 0, one without "
                         f"needs 0; got prefix_id={got} prefix_len={lens[bad[0]]}")
    bad = np.flatnonzero(lens >= df["prompt_len"].to_numpy())
    if len(bad):
        raise ValueError(f"{path}: row {bad[0]}: prefix_len {lens[bad[0]]} must be shorter than the prompt "
                         f"({df['prompt_len'].iloc[bad[0]]} tokens)")
    tokens = df["prompt_token_ids"].tolist() if "prompt_token_ids" in df else None
    first: dict[int, int] = {}   # prefix_id -> its first row
    for row, (k, n) in enumerate(zip(ids.tolist(), lens.tolist())):
        if k < 0:
            continue
        j = first.setdefault(k, row)
        if n != lens[j]:
            raise ValueError(f"{path}: rows {j} and {row} share prefix_id {k} but not its prefix_len "
                             f"({lens[j]} and {n})")
        if tokens is not None and list(tokens[row][:n]) != list(tokens[j][:n]):
            raise ValueError(f"{path}: rows {j} and {row} share prefix_id {k} but not its {n} prefix tokens")


def row_sampling(df: pd.DataFrame, n: int, beam_width: int, path: str) -> tuple[np.ndarray, np.ndarray]:
    """Each row's n and beam width: the file's columns, or the config's values where it has none."""
    sampling = []
    for col, value in (("n", n), ("beam_width", beam_width)):
        if col in df and value != 1:
            raise ValueError(f"{path}: the file sets {col} on every row; leave workload.{col} at 1 "
                             "or drop the column")
        sampling.append(df[col].to_numpy(dtype=np.int64) if col in df else np.full(len(df), value, dtype=np.int64))
    both = np.flatnonzero((sampling[0] > 1) & (sampling[1] > 1))
    if len(both):
        raise ValueError(f"{path}: row {both[0]}: n={sampling[0][both[0]]} from the config or file and "
                         f"beam_width={sampling[1][both[0]]}: a request is either parallel sampling or beam "
                         "search, not both")
    return sampling[0], sampling[1]


def trace_pairs(df: pd.DataFrame, rng: np.random.Generator, seed: int) -> TokenizedPairs:
    """The rows as (prompt ids, output length) pairs, with their shared prefixes; random ids from `rng`
    where the file has none, and then each prefix's ids from (`seed`, prefix_id)."""
    lens = df["prompt_len"].to_numpy()
    offsets = np.zeros(len(df) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    if "prompt_token_ids" in df:
        ids = np.fromiter((t for row in df["prompt_token_ids"] for t in row), dtype=np.int32, count=int(offsets[-1]))
    else:
        ids = rng.integers(0, VOCAB_SIZE, size=int(offsets[-1]), dtype=np.int32)
    if "prefix_id" not in df:
        return TokenizedPairs(ids, offsets, df["output_len"].to_numpy(dtype=np.int32))
    prefix_ids, prefix_lens = df["prefix_id"].to_numpy(dtype=np.int64), df["prefix_len"].to_numpy(dtype=np.int64)
    if "prompt_token_ids" not in df:
        for k in np.unique(prefix_ids[prefix_ids >= 0]).tolist():
            rows = np.flatnonzero(prefix_ids == k)
            length = int(prefix_lens[rows[0]])
            ids[offsets[rows][:, None] + np.arange(length)] = shared_prefix_ids(seed, k, length)
    return TokenizedPairs(ids, offsets, df["output_len"].to_numpy(dtype=np.int32), prefix_ids, prefix_lens)


def replay(df: pd.DataFrame, pairs: TokenizedPairs, path: str, n: np.ndarray, beam_width: np.ndarray) -> list[Request]:
    """Every row at its own arrival time, ids 0..n-1 in arrival order (ties keep file order), with
    each row's `n` and `beam_width`."""
    if "arrival_s" not in df:
        raise ValueError(f"{path}: arrival=trace replays the file's arrival_s column, which it lacks; "
                         "use arrival=offline, poisson or gamma to draw its pairs with new arrivals")
    order = np.argsort(df["arrival_s"].to_numpy(), kind="stable").tolist()
    arrivals = df["arrival_s"].to_numpy()
    out = []
    for i, j in enumerate(order):
        prefix_id, prefix_len = pairs.prefix(j)
        out.append(Request(id=i, arrival_s=float(arrivals[j]), prompt_token_ids=pairs.prompt(j),
                           output_len=int(pairs.output_lens[j]), n=int(n[j]), beam_width=int(beam_width[j]),
                           prefix_id=prefix_id, prefix_len=prefix_len, pair_index=j))
    return out
