"""The engine loop: release arrivals, schedule an iteration, execute it, account for it."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
import time

from tqdm import tqdm

from engines.sequence import Sequence, record_tokens
from workloads.request import Request

ITERATION_COLUMNS = (
    "start_s", "duration_s", "prefill_seqs", "prefill_tokens", "decode_seqs", "decode_rows",
    "batch_size", "num_held", "num_waiting", "preempted",
    "batch_rows", "copy_tokens", "swapped_out", "swapped_in", "swap_blocks", "num_swapped",
    "unshared_slots", "allocated_slots",
    "token_states", "reservation", "internal_fragmentation", "external_fragmentation", "free",
)
PROGRESS_EVERY_S = 0.5


@dataclass(slots=True)
class RunRecord:
    """Everything a run produced, before it is turned into tables."""

    capacity_slots: int
    iterations: list[tuple] = field(default_factory=list)   # rows in ITERATION_COLUMNS order
    sequences: list[Sequence] = field(default_factory=list)
    end_s: float = 0.0
    wall_s: float = 0.0


def run_engine(requests: list[Request], scheduler, executor, progress: bool | None = None,
               stop_at_last_arrival: bool = False) -> RunRecord:
    """Serve `requests` to completion (or, with `stop_at_last_arrival`, until the clock passes the last
    arrival, leaving the rest unfinished) and record every iteration.

    The executor owns the clock: `now()` reads it, `execute(batch)` runs one
    iteration and returns its duration (the sim's modelled time or the real
    backend's wall time), `wait_until(t)` idles until the next arrival.
    The split of KV memory is read after each iteration, before finished
    requests release their memory, so it shows what the iteration held.
    """
    capacity = scheduler.kv.capacity
    record = RunRecord(capacity_slots=capacity)
    pending = deque(sorted(requests, key=lambda r: (r.arrival_s, r.id)))
    stop_at = pending[-1].arrival_s if stop_at_last_arrival and pending else None
    wall_start = time.perf_counter()
    # progress None: a bar only on a terminal.
    bar = tqdm(total=len(requests), unit="req", desc="requests", leave=False,
               disable=None if progress is None else not progress)
    shown_at, shown_tokens, tokens = wall_start, 0, 0
    rows = record.iterations
    while pending or scheduler.has_work():
        now = executor.now()
        while pending and pending[0].arrival_s <= now:
            seq = Sequence(pending.popleft())
            record.sequences.append(seq)
            if not scheduler.add(seq, now):
                bar.update(1)
        if stop_at is not None and not pending and now > stop_at:
            break   # no iteration starts after the last arrival
        batch = scheduler.schedule(now) if scheduler.has_work() else None
        if batch is None:
            if pending:
                executor.wait_until(pending[0].arrival_s)
                continue
            if scheduler.has_work():
                raise RuntimeError("the scheduler holds requests but scheduled nothing, and none is due")
            break
        start = executor.now()
        duration = executor.execute(batch)
        end = executor.now()
        done_now = record_tokens(batch.advancing(), end)
        tokens += batch.num_rows
        scheduler.after_iteration(batch)
        split = scheduler.memory_split()
        unshared, allocated = scheduler.kv.usage()
        held = len(scheduler.held())
        finished = scheduler.release_finished(done_now)
        rows.append((start, duration, len(batch.prefill), sum(batch.prefill_lens), len(batch.decode),
                     len(batch.decode_context_lens), batch.num_seqs, held, len(scheduler.waiting),
                     batch.preempted, batch.num_rows, batch.copy_tokens, batch.swapped_out, batch.swapped_in,
                     len(batch.swap_out) + len(batch.swap_in), len(scheduler.swapped), unshared, allocated)
                    + split.as_tuple())
        if finished:
            bar.update(len(finished))
        if not bar.disable and time.perf_counter() - shown_at > PROGRESS_EVERY_S:
            wall = time.perf_counter()
            used = 1 - split.free / capacity
            bar.set_postfix(tok_s=f"{(tokens - shown_tokens) / (wall - shown_at):.0f}", batch=batch.num_seqs,
                            kv=f"{100 * used:.0f}%", refresh=False)
            shown_at, shown_tokens = wall, tokens
    bar.close()
    record.end_s = executor.now()
    record.wall_s = time.perf_counter() - wall_start
    return record
