"""Trace files: any workload's requests written to a file, and a file replayed as a workload.

    python -m pagedbench.workloads.write_trace OUT.jsonl sharegpt arrival=poisson request_rate=2 duration_s=600
    python run.py workload=trace workload.path=OUT.jsonl workload.arrival=trace   # replay it exactly

A trace file is JSON Lines (`.jsonl`, one object a line) or Parquet
(`.parquet`), one row per request with the columns `prompt_len` and
`output_len` (positive integers), optionally `id` (an integer >= 0, a
different one on every row), `arrival_s` (seconds, >= 0),
`prompt_token_ids` (a list of ints), `n` and `beam_width` (positive
integers, not both above 1 on a row; absent: the config's `n` and
`beam_width`) and, together, `prefix_id` (an integer >= 0, or null for no
shared prefix) and `prefix_len` (0 on rows without one; otherwise the same
for every row of a prefix_id and shorter than the prompt). A written trace
has its rows in arrival order, the sampling columns when some request
samples n > 1 or beams, the prefix columns when some request has a shared
prefix, and ids when they are not 0..n-1. `workload=trace` reads one
(`read_trace` checks it; workloads/trace_replay.py makes its requests):

- `arrival=trace` replays it: every row at its own `arrival_s`, which must
  be present, in the file's order, which must be arrival order (or set
  `sort_arrivals`); a request keeps the row's `id`, or gets the row's place
  in the file (0..n-1); `num_requests` and `duration_s` are not used;
- any other arrival treats its rows as a pool of (prompt, output) pairs,
  exactly as a dataset's: filtered, drawn in seeded permutations, with new
  arrival times and ids 0..n-1 in arrival order.

An error names the file and the row: a JSON Lines file's line (from 1), a
Parquet file's row (from 0, as pandas counts).

Rows without token ids get seeded random ones (throughput depends on
lengths, not on what the tokens say), so a file of lengths alone serves the
real backend too; the rows of one prefix_id then share that prefix's ids
(`shared_prefix_ids` of the config's seed), as a generated trace's do.
"""
from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from pagedbench.workloads.request import Request

SUFFIXES = (".jsonl", ".parquet")
COLUMNS = ("id", "prompt_len", "output_len", "arrival_s", "prompt_token_ids", "n", "beam_width", "prefix_id",
           "prefix_len")


def trace_frame(requests: list[Request], with_tokens: bool = False) -> pd.DataFrame:
    """One row per request, in arrival order (ties by id), as the engines take them; with an `id` column
    when the ids are not 0..n-1 in that order (a replayed file's own ids, say)."""
    requests = sorted(requests, key=lambda r: (r.arrival_s, r.id))
    rows = {"id": [r.id for r in requests]} if any(r.id != i for i, r in enumerate(requests)) else {}
    rows |= {"prompt_len": [r.prompt_len for r in requests], "output_len": [r.output_len for r in requests],
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
    """The file's rows, checked: positive integer lengths, arrivals >= 0 where given, distinct ids where given.

    Every error names the file and the line (JSON Lines, from 1; blank lines are skipped but counted) or
    row (Parquet, from 0): "t.jsonl line 7: output_len must be a positive integer, got 0". A JSON Lines
    file's line numbers stay in `df.attrs["lines"]`, for later errors (`Locator`).
    """
    path = Path(path)
    _check_suffix(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such trace file")
    df = _read_parquet(path) if path.suffix == ".parquet" else _read_jsonl(path)
    if not len(df):
        raise ValueError(f"{path}: the trace is empty")
    at = Locator(path, df)
    unknown = sorted(set(df.columns) - set(COLUMNS))
    if unknown:
        raise ValueError(f"{at(_first(df[unknown[0]].notna()))}: unknown column {unknown[0]!r}; a trace file has "
                         f"{list(COLUMNS)}")
    for col in ("prompt_len", "output_len"):
        if col not in df:
            raise ValueError(f"{at(0)}: no {col}; a trace needs a {col!r} column, on every row")
        _integers(df, col, at, minimum=1)
    for col in ("n", "beam_width"):
        if col in df:
            _integers(df, col, at, minimum=1)
    if "n" in df and "beam_width" in df:
        both = np.flatnonzero((df["n"] > 1) & (df["beam_width"] > 1))
        if len(both):
            raise ValueError(f"{at(both[0])}: a request is either parallel sampling (n > 1) or beam search "
                             "(beam_width > 1), not both")
    if "arrival_s" in df:
        arrivals = pd.to_numeric(df["arrival_s"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        bad = np.flatnonzero(~(np.isfinite(arrivals) & (arrivals >= 0)))
        if len(bad):
            raise ValueError(f"{at(bad[0])}: arrival_s must be a finite number >= 0, got "
                             f"{_show(df['arrival_s'].iloc[bad[0]])}")
        df["arrival_s"] = arrivals
    if "id" in df:
        _check_ids(df, at)
    if "prompt_token_ids" in df:
        _check_tokens(df, at)
    if ("prefix_id" in df) != ("prefix_len" in df):
        given = "prefix_id" if "prefix_id" in df else "prefix_len"
        raise ValueError(f"{at(_first(df[given].notna()))}: prefix_id and prefix_len go together: give both "
                         "columns or neither")
    if "prefix_id" in df:
        _check_prefixes(df, at)
    return df


class Locator:
    """Names rows of a trace file in an error: "t.jsonl line 7" (a JSON Lines file's line, from 1; read_trace
    keeps them in `df.attrs["lines"]`), "t.parquet row 6" (a Parquet file's row, from 0)."""

    def __init__(self, path: str | Path, df: pd.DataFrame) -> None:
        lines = df.attrs.get("lines")
        self.path = Path(path)
        self.unit, self.numbers = ("line", lines) if lines is not None else ("row", range(len(df)))

    def name(self, position: int) -> str:
        """"line 7": the row at this position (0-based place in the frame)."""
        return f"{self.unit} {self.numbers[position]}"

    def __call__(self, *positions: int) -> str:
        """The file and the rows at these positions: "t.jsonl line 7", "t.jsonl lines 3 and 9"."""
        where = " and ".join(str(self.numbers[p]) for p in positions)
        return f"{self.path} {self.unit}{'s' if len(positions) > 1 else ''} {where}"


def _read_jsonl(path: Path) -> pd.DataFrame:
    records, lines = [], []
    try:
        with path.open(encoding="utf-8") as f:
            for number, text in enumerate(f, start=1):
                if not text.strip():
                    continue
                try:
                    record = json.loads(text)
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path} line {number}: not JSON ({err.msg}, column {err.colno})") from None
                if not isinstance(record, dict):
                    raise ValueError(f"{path} line {number}: not a JSON object ({{\"prompt_len\": ..., ...}})")
                records.append(record)
                lines.append(number)
    except (UnicodeDecodeError, OSError) as err:
        raise ValueError(f"{path}: not a readable trace file ({str(err).splitlines()[0]})") from None
    df = pd.DataFrame.from_records(records)
    df.attrs["lines"] = lines
    return df


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        df = pd.read_parquet(path)
    except (ValueError, OSError) as err:
        raise ValueError(f"{path}: not a readable trace file ({str(err).splitlines()[0]})") from None
    return df.reset_index(drop=True)


def _first(mask: pd.Series | np.ndarray) -> int:
    """The position of the first True (0 if none is)."""
    hits = np.flatnonzero(np.asarray(mask))
    return int(hits[0]) if len(hits) else 0


def _show(value: object) -> str:
    """A cell's value as the file would spell it ("no value" for null or a key the row lacks), 3 for 3.0."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "no value"
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return json.dumps(value) if isinstance(value, str) else str(value)


def _integers(df: pd.DataFrame, col: str, at: Locator, minimum: int) -> None:
    """Checks that `col` holds integers >= minimum on every row and makes it int64."""
    values = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = np.flatnonzero(np.isnan(values) | (values % 1 != 0) | (values < minimum) | (values >= 2**63))
    if len(bad):
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{at(bad[0])}: {col} must be {kind}, got {_show(df[col].iloc[bad[0]])}")
    df[col] = pd.to_numeric(df[col]).astype(np.int64)


def _check_ids(df: pd.DataFrame, at: Locator) -> None:
    """Checks that the `id` column holds distinct integers >= 0."""
    _integers(df, "id", at, minimum=0)
    again = df["id"].duplicated().to_numpy()
    if again.any():
        ids, second = df["id"].to_numpy(), _first(again)
        raise ValueError(f"{at(_first(ids == ids[second]), second)}: both have id {ids[second]}; "
                         "each request's id is its own")


def _check_tokens(df: pd.DataFrame, at: Locator) -> None:
    """Checks that each row's prompt_token_ids is a list of prompt_len integer ids in [0, 2^31)."""
    tokens, lens = df["prompt_token_ids"].tolist(), df["prompt_len"].to_numpy()
    for i, (ids, n) in enumerate(zip(tokens, lens.tolist())):
        if not isinstance(ids, (list, tuple, np.ndarray)):
            raise ValueError(f"{at(i)}: prompt_token_ids must be a list of token ids, got {_show(ids)}")
        if len(ids) != n:
            raise ValueError(f"{at(i)}: prompt_token_ids has {len(ids)} ids but prompt_len is {n}")
    try:
        flat = token_array(tokens, int(lens.sum()))
    except (TypeError, ValueError):   # something that is no number: find it one by one
        flat = np.array([_number(t) for t in itertools.chain.from_iterable(tokens)])
    bad = np.flatnonzero(np.isnan(flat) | (flat % 1 != 0) | (flat < 0) | (flat >= 2**31))
    if len(bad):
        ends = np.cumsum(lens)
        row = int(np.searchsorted(ends, bad[0], side="right"))
        value = tokens[row][bad[0] - (ends[row] - lens[row])]
        raise ValueError(f"{at(row)}: prompt_token_ids must be integers in [0, 2^31), got "
                         f"{_show(value.item() if isinstance(value, np.generic) else value)}")


def token_array(tokens: list, total: int) -> np.ndarray:
    """Every row's token ids back to back, as float64 (exact for ids below 2^53)."""
    return np.fromiter(itertools.chain.from_iterable(tokens), dtype=np.float64, count=total)


def _number(value: object) -> float:
    """A token id as a number, as `token_array` reads it; NaN for what is no number (a string, a list)."""
    if not np.isscalar(value):
        return np.nan
    try:
        return float(np.float64(value))
    except (TypeError, ValueError):
        return np.nan


def _check_prefixes(df: pd.DataFrame, at: Locator) -> None:
    """Checks the prefix columns and makes prefix_id int64, -1 on rows without a prefix."""
    missing = df["prefix_id"].isna().to_numpy()
    ids = pd.to_numeric(df["prefix_id"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = np.flatnonzero((np.isnan(ids) & ~missing) | (~missing & ((ids % 1 != 0) | (ids < 0))))
    if len(bad):
        raise ValueError(f"{at(bad[0])}: prefix_id must be an integer >= 0, or null for no shared prefix, got "
                         f"{_show(df['prefix_id'].iloc[bad[0]])}")
    df["prefix_id"] = np.where(missing, -1, np.nan_to_num(ids, nan=-1)).astype(np.int64)
    _integers(df, "prefix_len", at, minimum=0)
    ids, lens = df["prefix_id"].to_numpy(), df["prefix_len"].to_numpy()
    bad = np.flatnonzero((ids >= 0) != (lens > 0))
    if len(bad):
        got = ids[bad[0]] if ids[bad[0]] >= 0 else "null"
        raise ValueError(f"{at(bad[0])}: a row with a prefix_id needs a prefix_len > 0, one without "
                         f"needs 0; got prefix_id={got} prefix_len={lens[bad[0]]}")
    bad = np.flatnonzero(lens >= df["prompt_len"].to_numpy())
    if len(bad):
        raise ValueError(f"{at(bad[0])}: prefix_len {lens[bad[0]]} must be shorter than the prompt "
                         f"({df['prompt_len'].iloc[bad[0]]} tokens)")
    tokens = df["prompt_token_ids"].tolist() if "prompt_token_ids" in df else None
    first: dict[int, int] = {}   # prefix_id -> its first row
    for row, (k, n) in enumerate(zip(ids.tolist(), lens.tolist())):
        if k < 0:
            continue
        j = first.setdefault(k, row)
        if n != lens[j]:
            raise ValueError(f"{at(j, row)}: share prefix_id {k} but not its prefix_len ({lens[j]} and {n})")
        if tokens is not None and list(tokens[row][:n]) != list(tokens[j][:n]):
            raise ValueError(f"{at(j, row)}: share prefix_id {k} but not its {n} prefix tokens")
