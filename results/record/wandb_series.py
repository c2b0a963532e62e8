"""The per-iteration series a wandb run charts: iterations gathered into points against the run's own clock.

`series_points` turns consecutive iterations into one point (counts summed, levels weighted by duration, the
KV split as fractions of the budget); `LiveSeries` is the engine loop's callback that makes those points while
a run goes; `pagedbench.results.record.wandb_backfill` makes the same points from a finished run's iterations table.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
import math
from typing import TYPE_CHECKING

import numpy as np

from pagedbench.engines.kv.memory_split import CATEGORIES

if TYPE_CHECKING:
    from pagedbench.engines.run_record import IterationRow

SERIES = "iteration"   # the series' keys are `iteration/<name>`
CLOCK = "clock_s"      # their x-axis: the run's clock at a point's first iteration (the wandb step is its index)


def bucket_starts(n: int, max_points: int) -> np.ndarray:
    """First row of each of min(n, max_points) contiguous, near-equal buckets of n rows."""
    k = min(n, max_points)
    return (np.arange(k, dtype=np.int64) * n) // k


def series_points(cols: Mapping[str, np.ndarray], starts: np.ndarray, capacity) -> dict[str, np.ndarray]:
    """The series to chart, one point per bucket of consecutive iterations (`starts`: each bucket's first row).

    `cols` holds the iterations' columns by `IterationRow` name (a frame of
    iterations.parquet, or a live window); `capacity` is the KV budget in
    slots (a number, or one per row). Every point covers its whole bucket,
    so nothing between points is lost: `clock_s` is the bucket's first
    iteration's start on the run's clock; counts are the bucket's sums
    (`preempted`, `swapped_out`, `swapped_in`, groups); levels (batch size,
    waiting requests, the KV split as fractions of capacity, the memory
    saved by sharing, swapped groups) are means weighted by iteration
    duration, like the summary's `mem_*`. Two throughputs, saying what they
    count: `rows_per_s`, output tokens (one per advancing row) per second of
    the run's clock from the bucket's first start to its last end, idle
    time included; `tokens_per_s`, computed tokens (prompt tokens
    prefilled + one per decoded row) per second of the bucket's iterations.
    """
    starts = np.asarray(starts, dtype=np.int64)
    n = len(cols["duration_s"])
    ends = np.append(starts[1:], n) - 1   # each bucket's last row

    def column(name) -> np.ndarray:
        return np.asarray(cols[name], dtype=np.float64)

    def sums(values) -> np.ndarray:
        return np.add.reduceat(np.asarray(values, dtype=np.float64), starts)

    duration = sums(column("duration_s"))
    count = sums(np.ones(n))
    weight = column("duration_s")

    def level(values) -> np.ndarray:
        values = np.asarray(values, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(duration > 0, sums(values * weight) / duration, sums(values) / count)

    start_s = column("start_s")
    capacity = np.asarray(capacity, dtype=np.float64)
    rows = column("batch_rows") if "batch_rows" in cols else column("decode_seqs")   # old runs: groups
    decoded = np.where(column("decode_seqs") > 0, rows, 0)
    span = start_s[ends] + weight[ends] - start_s[starts]
    with np.errstate(invalid="ignore", divide="ignore"):
        tokens_per_s = np.where(duration > 0, sums(column("prefill_tokens") + decoded) / duration, np.nan)
        rows_per_s = np.where(span > 0, sums(rows) / span, np.nan)
    out = {
        CLOCK: start_s[starts],
        "batch_size": level(column("batch_size")),
        "num_waiting": level(column("num_waiting")),
        "rows_per_s": rows_per_s,
        "tokens_per_s": tokens_per_s,
        "preempted": sums(column("preempted")),
        **{f"mem_{cat}": level(column(cat) / capacity) for cat in CATEGORIES},
    }
    if "unshared_slots" in cols:   # sharing and swapping (runs recorded since they were added)
        unshared = column("unshared_slots")
        with np.errstate(invalid="ignore", divide="ignore"):
            saved = np.where(unshared > 0, 1 - column("allocated_slots") / unshared, 0.0)
        out.update(memory_saving=level(saved), swapped_out=sums(column("swapped_out")),
                   num_swapped=level(column("num_swapped")))
    if "swapped_in" in cols:
        out["swapped_in"] = sums(column("swapped_in"))
    return out


def series_row(point: Mapping[str, float]) -> dict[str, float]:
    """One point as wandb history: `clock_s` and `iteration/<name>`, without missing values."""
    row = {CLOCK: float(point[CLOCK])}
    row.update((f"{SERIES}/{k}", float(v)) for k, v in point.items() if k != CLOCK and math.isfinite(v))
    return row


class LiveSeries:
    """The engine loop's per-iteration callback: iterations gathered into windows, one point logged per window.

    A window closes after `every` iterations. `every` is set after each
    point so the run's expected iterations make about `max_points` points:
    the iterations so far over the share of the trace's rows (output
    tokens, `expected_rows`) computed so far. Tokens at a steady pace make
    `max_points` points; a pace that rises, fewer; one that falls (a long
    tail) would make more, so once `max_points` are logged each later point
    covers at least 8 / `max_points` of the iterations so far (a 100,000-
    iteration run whose pace falls 100-fold logs about 1.3 x `max_points`).
    Cheap per iteration (an append and an add); a window's point is made by
    `series_points`, as for a finished run. `log(row, step)` receives each.
    """

    def __init__(self, log: Callable[[dict, int], None], capacity: int, expected_rows: int, max_points: int):
        self.log = log
        self.capacity = capacity
        self.expected_rows = max(int(expected_rows), 0)
        self.max_points = max_points
        self.window: list[IterationRow] = []
        self.seen = 0        # iterations in the points logged so far
        self.rows_done = 0
        self.every = 1
        self.points = 0

    def __call__(self, row: "IterationRow") -> None:
        self.window.append(row)
        self.rows_done += row.batch_rows
        if len(self.window) >= self.every:
            self.flush()

    def flush(self) -> None:
        """Log the open window as a point (at the end of a run: its last, partial window)."""
        if not self.window:
            return
        window, self.window = self.window, []
        cols = dict(zip(window[0]._fields, map(np.asarray, zip(*window))))
        point = {k: v[0] for k, v in series_points(cols, np.zeros(1, dtype=np.int64), self.capacity).items()}
        self.log(series_row(point), self.seen)
        self.seen += len(window)
        self.points += 1
        if self.rows_done > 0 and self.expected_rows > 0:
            done = min(1.0, self.rows_done / self.expected_rows)
            self.every = max(1, round(self.seen / done / self.max_points))
        if self.points >= self.max_points:   # the pace fell (a long tail): later points thin out faster
            self.every = max(self.every, 8 * self.seen // self.max_points)
