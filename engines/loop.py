"""The trace driver: release a trace's arrivals by the executor's clock and step the engine until it is served.

`run_engine` drives one scheduler and executor; `EngineRunner` is our
backends' `Runner` (warm-up, clock, `run_engine`, what the summary says of
the backend), the counterpart of a peer's runner (`pagedbench.engines.peers.replay`).
"""
from __future__ import annotations

from collections import deque
import time
from typing import Callable

import numpy as np
from tqdm import tqdm

from pagedbench.engines.engine import Engine
from pagedbench.engines.protocols import Backend, Executor, Scheduler
from pagedbench.engines.run_record import IterationRow, RunRecord, ServedRun
from pagedbench.workloads.request import Request

PROGRESS_EVERY_S = 0.5


def progress_text(executor: str, clock_s: float, tokens_per_s: float, batch: int, kv_used: float) -> str:
    """The bar's postfix. The sim shows its simulated clock and simulated throughput, labelled `sim_`, so they
    never read as a server's rates; the real backend shows wall-clock tokens per second (one per row)."""
    if executor == "sim":
        return f"sim_t={clock_s:.1f}s sim_tok/s={tokens_per_s:,.0f} batch={batch} kv={kv_used:.0%}"
    return f"tok/s={tokens_per_s:,.0f} batch={batch} kv={kv_used:.0%}"


def run_engine(requests: list[Request], scheduler: Scheduler, executor: Executor, progress: bool | None = None,
               stop_at_last_arrival: bool = False,
               on_iteration: Callable[[IterationRow], None] | None = None) -> RunRecord:
    """Serve `requests` to completion (or, with `stop_at_last_arrival`, until the clock passes the last
    arrival, leaving the rest unfinished) and record every iteration (`Engine.step`).

    The executor owns the clock: `now()` reads it, `execute(batch)` runs one
    iteration and returns its duration (the sim's modelled time or the real
    backend's wall time), `wait_until(t)` idles until the next arrival.
    `on_iteration`, when given, is called with each iteration's row as soon
    as it is recorded (a live logger); None costs nothing.
    """
    engine = Engine(scheduler, executor)
    capacity = scheduler.kv.capacity
    record = RunRecord(capacity_slots=capacity)
    pending = deque(sorted(requests, key=lambda r: (r.arrival_s, r.id)))
    stop_at = pending[-1].arrival_s if stop_at_last_arrival and pending else None
    wall_start = time.perf_counter()
    # progress None: a bar only on a terminal.
    bar = tqdm(total=len(requests), unit="req", desc="requests", leave=False,
               disable=None if progress is None else not progress)
    sim = executor.name == "sim"   # rates on the simulated clock, else on the wall clock
    shown_at, shown_clock, shown_tokens, tokens = wall_start, executor.now(), 0, 0
    rows = record.iterations

    def may_start(t: float) -> bool:
        """Whether an iteration starting at `t` releases no arrival and starts before a stop."""
        if pending:
            return pending[0].arrival_s > t
        return stop_at is None or t <= stop_at
    while pending or engine.has_work():
        now = executor.now()
        while pending and pending[0].arrival_s <= now:
            seq, queued = engine.add(pending.popleft(), now)
            record.sequences.append(seq)
            if not queued:
                bar.update(1)
        if stop_at is not None and not pending and now > stop_at:
            break   # no iteration starts after the last arrival
        out = engine.step(now)
        if out is None:
            if pending:
                executor.wait_until(pending[0].arrival_s)
                continue
            if engine.has_work():
                raise RuntimeError("the scheduler holds requests but scheduled nothing, and none is due")
            break
        rows.append(out.row)
        tokens += out.row.batch_rows
        if on_iteration is not None:
            on_iteration(out.row)
        for row in engine.fast_forward(may_start):   # after a quiet decode step: those that repeat it
            rows.append(row)
            tokens += row.batch_rows
            if on_iteration is not None:
                on_iteration(row)
        if out.finished:
            bar.update(len(out.finished))
        if not bar.disable and time.perf_counter() - shown_at > PROGRESS_EVERY_S:
            wall, end = time.perf_counter(), executor.now()
            elapsed = end - shown_clock if sim else wall - shown_at
            rate = (tokens - shown_tokens) / elapsed if elapsed > 0 else 0.0
            last = rows[-1]   # the step's own row, or the last of the steps it fast-forwarded
            bar.set_postfix_str(progress_text(executor.name, end, rate, last.batch_size, 1 - last.free / capacity),
                                refresh=False)
            shown_at, shown_clock, shown_tokens = wall, end, tokens
    bar.close()
    record.end_s = executor.now()
    record.wall_s = time.perf_counter() - wall_start
    return record


class EngineRunner:
    """One of our engines as a `Runner`: the backend's builder output, serving a trace with `run_engine`."""

    live = True

    def __init__(self, backend: Backend, label: str, model_name: str):
        self.backend = backend
        self.label = label
        self.where = f"{model_name} on {backend.where}"
        self.capacity = backend.scheduler.kv.capacity

    def describe(self) -> str:
        return f"{self.backend.describe()}\nengine {self.label}: {self.backend.scheduler.kv.describe()}"

    def serve(self, requests: list[Request], progress: bool | None, stop_at_last_arrival: bool,
              on_iteration: Callable[[IterationRow], None] | None) -> ServedRun:
        backend = self.backend
        backend.executor.warmup()
        backend.executor.start_clock()
        record = run_engine(requests, backend.scheduler, backend.executor, progress=progress,
                            stop_at_last_arrival=stop_at_last_arrival, on_iteration=on_iteration)
        busy = float(np.sum([row.duration_s for row in record.iterations]))
        return ServedRun(record, self.label, self.where, backend.summary_fields(), backend.after_run_fields(busy))
