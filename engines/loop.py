"""The engine loop: release arrivals, schedule an iteration, execute it, account for it."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
import time
from typing import Callable, NamedTuple

from tqdm import tqdm

from engines.batch import Batch
from engines.kv.memory_split import MemorySplit
from engines.protocols import Executor, Scheduler
from engines.sequence import Sequence, record_tokens
from workloads.request import Request

class IterationRow(NamedTuple):
    """One iteration as the run records it: what ran, what waited, what moved, and the KV split after it.

    Memory fields are token slots of the KV budget; `unshared_slots` are the slots the held groups would
    need without sharing, `allocated_slots` those they hold. Built by keyword, read by name; a tuple, so a
    run of many iterations stays cheap to record and turns into a table at once.
    """

    start_s: float
    duration_s: float
    prefill_seqs: int          # groups prefilled
    prefill_tokens: int        # prompt tokens computed (a static batch's padding included)
    decode_seqs: int           # groups decoded
    decode_rows: int           # rows decoded (a group of width w is w rows)
    batch_size: int            # groups in the batch
    num_held: int              # groups holding KV memory after the iteration
    num_waiting: int
    preempted: int             # groups preempted to make room for this iteration
    batch_rows: int
    copy_tokens: int           # tokens copied on the device (copy-on-write, contiguous forks)
    swapped_out: int           # groups
    swapped_in: int            # groups
    swap_blocks: int           # blocks moved either way
    num_swapped: int           # groups on the host after the iteration
    admission_blocked_by: str  # why the head of the queue was not admitted (Batch.admission_blocked_by); "" if none
    unshared_slots: int
    allocated_slots: int
    token_states: int
    reservation: int
    internal_fragmentation: int
    external_fragmentation: int
    free: int


ITERATION_COLUMNS = IterationRow._fields
PROGRESS_EVERY_S = 0.5


@dataclass(slots=True)
class RunRecord:
    """Everything a run produced, before it is turned into tables."""

    capacity_slots: int
    iterations: list[IterationRow] = field(default_factory=list)
    sequences: list[Sequence] = field(default_factory=list)
    end_s: float = 0.0
    wall_s: float = 0.0


def iteration_row(batch: Batch, scheduler: Scheduler, start: float, duration: float, split: MemorySplit,
                  usage: tuple[int, int], held: int) -> IterationRow:
    """One iteration's row: what ran, what waited, what moved, and the KV split read after its forward pass
    (`usage`: the manager's (unshared, allocated) slots). The engine loop and the online loop record the same."""
    unshared, allocated = usage
    return IterationRow(
        start_s=start, duration_s=duration, prefill_seqs=len(batch.prefill),
        prefill_tokens=sum(batch.prefill_lens), decode_seqs=len(batch.decode),
        decode_rows=len(batch.decode_context_lens), batch_size=batch.num_seqs, num_held=held,
        num_waiting=len(scheduler.waiting), preempted=batch.preempted, batch_rows=batch.num_rows,
        copy_tokens=batch.copy_tokens, swapped_out=batch.swapped_out, swapped_in=batch.swapped_in,
        swap_blocks=len(batch.swap_out) + len(batch.swap_in), num_swapped=len(scheduler.swapped),
        admission_blocked_by=batch.admission_blocked_by,
        unshared_slots=unshared, allocated_slots=allocated, token_states=split.token_states,
        reservation=split.reservation, internal_fragmentation=split.internal_fragmentation,
        external_fragmentation=split.external_fragmentation, free=split.free)


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
    arrival, leaving the rest unfinished) and record every iteration.

    The executor owns the clock: `now()` reads it, `execute(batch)` runs one
    iteration and returns its duration (the sim's modelled time or the real
    backend's wall time), `wait_until(t)` idles until the next arrival.
    The split of KV memory is read after each iteration, before its beam
    forks and before finished requests release their memory, so it shows
    what the iteration's forward pass held (after copy-on-write).
    `on_iteration`, when given, is called with each iteration's row as soon
    as it is recorded (a live logger); None costs nothing.
    """
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
        # The KV split as the forward pass saw it (copy-on-write done, each row's token written), read before
        # a beam step re-forms the rows: a fork shares blocks the next step copies before any forward pass.
        split = scheduler.memory_split()
        unshared, allocated = scheduler.kv.usage()
        scheduler.after_iteration(batch)
        held = len(scheduler.held())
        finished = scheduler.release_finished(done_now)
        rows.append(iteration_row(batch, scheduler, start, duration, split, (unshared, allocated), held))
        if on_iteration is not None:
            on_iteration(rows[-1])
        if finished:
            bar.update(len(finished))
        if not bar.disable and time.perf_counter() - shown_at > PROGRESS_EVERY_S:
            wall = time.perf_counter()
            elapsed = end - shown_clock if sim else wall - shown_at
            rate = (tokens - shown_tokens) / elapsed if elapsed > 0 else 0.0
            bar.set_postfix_str(progress_text(executor.name, end, rate, batch.num_seqs, 1 - split.free / capacity),
                                refresh=False)
            shown_at, shown_clock, shown_tokens = wall, end, tokens
    bar.close()
    record.end_s = executor.now()
    record.wall_s = time.perf_counter() - wall_start
    return record
