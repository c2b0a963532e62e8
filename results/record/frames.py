"""A RunRecord as two tables: one row per iteration, one row per request.

A request's `token_times_s` lists the end time of each iteration that gave it
a token (one per step; a group's rows share it): its ITLs are their gaps.
"""
from __future__ import annotations

import pandas as pd

from pagedbench.engines.run_record import ITERATION_COLUMNS, RunRecord

REQUEST_COLUMNS = ("id", "arrival_s", "admitted_s", "first_token_s", "finish_s", "prompt_len",
                   "output_len", "width", "preemptions", "swaps", "status", "rejected_reason", "token_times_s")


def iterations_frame(record: RunRecord) -> pd.DataFrame:
    """Memory columns are token slots; `capacity_slots` is the KV budget they split."""
    df = pd.DataFrame.from_records(record.iterations, columns=list(ITERATION_COLUMNS))
    df.insert(0, "iteration", range(len(df)))
    df["capacity_slots"] = record.capacity_slots
    return df


def requests_frame(record: RunRecord) -> pd.DataFrame:
    rows = [(s.id, s.request.arrival_s, s.admitted_s, s.first_token_s, s.finish_s, s.prompt_len,
             s.request.output_len, s.width, s.preemptions, s.swaps, s.status.value, s.rejected_reason,
             s.token_times_s)
            for s in sorted(record.sequences, key=lambda s: s.id)]
    df = pd.DataFrame.from_records(rows, columns=list(REQUEST_COLUMNS))
    for col in ("admitted_s", "first_token_s", "finish_s"):
        df[col] = df[col].astype("float64")
    df["rejected_reason"] = df["rejected_reason"].astype("string")
    return df
