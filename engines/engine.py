"""The engine: a scheduler and an executor, stepped one iteration at a time.

`Engine.step()` is the one place where an iteration's calls happen, in the
order that matters (as nano-vllm's `LLMEngine.step`: schedule, run,
postprocess):

1. the scheduler picks the batch (`schedule`);
2. the executor runs it and moves the clock (`execute`);
3. every advancing sequence records its token (`record_tokens`);
4. the KV split is read as the forward pass saw it: copy-on-write done,
   each row's token written, before a beam step re-forms the rows (a fork
   shares blocks the next step copies before any forward pass) and before
   finished requests free their memory;
5. the scheduler applies the step's beam forks (`after_iteration`), counts
   the groups holding memory, and frees the finished ones
   (`release_finished`).

It returns a `StepOutput`: the iteration's row, the sequences that gained a
token, and those that finished. Drivers only decide when requests arrive
and what to do with the output: `engines.loop.run_engine` replays a trace,
`engines.serving.online_loop.serve_loop` takes requests from an inbox.
"""
from __future__ import annotations

from dataclasses import dataclass

from engines.batch import Batch
from engines.protocols import Executor, Scheduler
from engines.run_record import IterationRow
from engines.sequence import Sequence, record_tokens
from workloads.request import Request


@dataclass(slots=True)
class StepOutput:
    """What one iteration did."""

    row: IterationRow            # the iteration as the run records it
    batch: Batch
    advanced: list[Sequence]     # groups that produced a token (one per row), in batch order
    finished: list[Sequence]     # groups that produced their last token and freed their memory


class Engine:
    """Owns a scheduler over its KV manager and the executor that runs its batches (and the clock)."""

    def __init__(self, scheduler: Scheduler, executor: Executor):
        self.scheduler = scheduler
        self.executor = executor

    def add(self, request: Request, now: float) -> tuple[Sequence, bool]:
        """Queue an arrived request as a sequence; False when it was rejected (it can never run: its
        `rejected_reason` says why)."""
        seq = Sequence(request)
        return seq, self.scheduler.add(seq, now)

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def step(self, now: float) -> StepOutput | None:
        """Run one iteration scheduled at `now` (the executor's clock when the driver released the arrivals);
        None when the scheduler has nothing it can run now."""
        scheduler, executor = self.scheduler, self.executor
        if not scheduler.has_work():
            return None
        batch = scheduler.schedule(now)
        if batch is None:
            return None
        start = executor.now()
        duration = executor.execute(batch)
        advanced = batch.advancing()
        done_now = record_tokens(advanced, executor.now())
        split = scheduler.memory_split()
        unshared, allocated = scheduler.kv.usage()
        scheduler.after_iteration(batch)
        held = len(scheduler.held())
        finished = scheduler.release_finished(done_now)
        row = IterationRow(
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
        return StepOutput(row, batch, advanced, finished)
