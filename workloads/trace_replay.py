"""A trace file's rows made into requests: replayed at their own arrival times, or a pool of pairs.

`read_trace` (workloads/trace_file.py) checks the rows; `build_workload` calls these. A replay keeps the
file's order, which must be arrival order unless the config asks to sort it (`sort_arrivals`), and the
file's ids where it has an `id` column: a request's id names its row, so a run's requests table and the
file line up.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pagedbench.workloads.pairs import TokenizedPairs
from pagedbench.workloads.request import Request
from pagedbench.workloads.synthetic import VOCAB_SIZE, shared_prefix_ids
from pagedbench.workloads.trace_file import Locator, token_array
from pagedbench.workloads.trace_size import progress


def row_sampling(df: pd.DataFrame, n: int, beam_width: int, path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Each row's n and beam width: the file's columns, or the config's values where it has none."""
    sampling = []
    for col, value in (("n", n), ("beam_width", beam_width)):
        if col in df and value != 1:
            raise ValueError(f"{path}: the file sets {col} on every row; leave workload.{col} at 1 "
                             "or drop the column")
        sampling.append(df[col].to_numpy(dtype=np.int64) if col in df else np.full(len(df), value, dtype=np.int64))
    both = np.flatnonzero((sampling[0] > 1) & (sampling[1] > 1))
    if len(both):
        at = Locator(path, df)
        raise ValueError(f"{at(both[0])}: n={sampling[0][both[0]]} from the config or file and "
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
        ids = token_array(df["prompt_token_ids"].tolist(), int(offsets[-1])).astype(np.int32)
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


def replay(df: pd.DataFrame, pairs: TokenizedPairs, path: str | Path, n: np.ndarray, beam_width: np.ndarray,
           sort_arrivals: bool = False) -> list[Request]:
    """Every row at its own arrival time, with its `n` and `beam_width`, in arrival order.

    The rows must already be in arrival order (ties in any order): a row that arrives before the one
    above it is an error naming its line, unless `sort_arrivals`, which sorts them (ties keep file
    order). Each request's id is the file's `id` column, or its row's place in the file (0..n-1) where
    the file has none; `pair_index` is that place either way.
    """
    at = Locator(path, df)
    if "arrival_s" not in df:
        raise ValueError(f"{path}: arrival=trace replays the file's arrival_s column, which it lacks; "
                         "use arrival=offline, poisson or gamma to draw its pairs with new arrivals")
    arrivals = df["arrival_s"].to_numpy()
    back = np.flatnonzero(arrivals[1:] < arrivals[:-1])
    if len(back) and not sort_arrivals:
        i = int(back[0]) + 1
        raise ValueError(f"{at(i)}: arrival_s {arrivals[i]:g} is earlier than {at.name(i - 1)}'s "
                         f"{arrivals[i - 1]:g}; a trace lists its rows in arrival order (or set "
                         "workload.sort_arrivals=true to sort them)")
    order = np.argsort(arrivals, kind="stable").tolist() if len(back) else range(len(df))
    ids = df["id"].to_numpy() if "id" in df else np.arange(len(df))
    out = []
    for j in progress(order, len(df), "trace"):
        prefix_id, prefix_len = pairs.prefix(j)
        out.append(Request(id=int(ids[j]), arrival_s=float(arrivals[j]), prompt_token_ids=pairs.prompt(j),
                           output_len=int(pairs.output_lens[j]), n=int(n[j]), beam_width=int(beam_width[j]),
                           prefix_id=prefix_id, prefix_len=prefix_len, pair_index=j))
    return out
