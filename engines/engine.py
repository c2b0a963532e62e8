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

`Engine.fast_forward` runs what would follow a quiet decode step (every
running group one row, nothing preempted, copied or swapped) until the next
event: a request arrives (the driver's `may_start` says no) or finishes, a
step would need a block that is not there, or a region would fill. Those
steps repeat the last batch with every context one token longer, so their
times come from the cost model in closed form (`Executor.quiet_decodes`),
their blocks are taken in the step-by-step order, and each gets its row and
split as `step` would record them; the sequences get their tokens at the
end. The same run, step for step (`backend.fast_forward=false` keeps the
step-by-step path; tests/engines/test_fast_forward.py holds the two equal).
"""
from __future__ import annotations

from collections.abc import Callable
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


def memory_fields(scheduler: Scheduler) -> dict[str, int]:
    """An iteration row's memory columns, read now: the saving's terms and the KV split."""
    split = scheduler.memory_split()
    unshared, allocated = scheduler.kv.usage()
    return {"unshared_slots": unshared, "allocated_slots": allocated, "token_states": split.token_states,
            "reservation": split.reservation, "internal_fragmentation": split.internal_fragmentation,
            "external_fragmentation": split.external_fragmentation, "free": split.free}


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
        memory = memory_fields(scheduler)
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
            admission_blocked_by=batch.admission_blocked_by, **memory)
        return StepOutput(row, batch, advanced, finished)

    def fast_forward(self, may_start: Callable[[float], bool]) -> list[IterationRow]:
        """After a quiet decode step: run the steps that repeat it while `may_start(clock)` holds and no event
        comes (see the module's docstring); their rows (none if the engine is not in a quiet stretch)."""
        scheduler, executor = self.scheduler, self.executor
        quiet = scheduler.quiet() if executor.fast_forward else None
        if quiet is None:
            return []
        seqs, blocked_by = quiet
        kv = scheduler.kv
        steps = min(s.output_len - s.generated for s in seqs) - 1   # the step a group finishes in is an event
        takes = []                                                   # (step, group) of each block taken
        for i, seq in enumerate(seqs):
            first, period = kv.growth(seq)
            if period == 0:
                steps = min(steps, first)
                continue
            takes += [(j, i) for j in range(first, steps, period)]
        takes.sort()
        if len(takes) > kv.available_blocks:                         # the step short of a block preempts
            steps = min(steps, takes[kv.available_blocks][0])
        if steps <= 0:
            return []
        ran = executor.quiet_decodes([s.prompt_len + s.generated for s in seqs], steps, may_start)
        rows, n, waiting, taken = [], len(seqs), len(scheduler.waiting), 0
        for j, (start, duration, _) in enumerate(ran):
            while taken < len(takes) and takes[taken][0] == j:
                kv.append_block(seqs[takes[taken][1]])
                taken += 1
            scheduler.quiet_step()
            rows.append(IterationRow(
                start_s=start, duration_s=duration, prefill_seqs=0, prefill_tokens=0, decode_seqs=n,
                decode_rows=n, batch_size=n, num_held=n, num_waiting=waiting, preempted=0, batch_rows=n,
                copy_tokens=0, swapped_out=0, swapped_in=0, swap_blocks=0, num_swapped=0,
                admission_blocked_by=blocked_by, **memory_fields(scheduler)))
        if ran:
            ends = [end for _, _, end in ran]
            for seq in seqs:
                seq.generated += len(ran)
                seq.token_times_s.extend(ends)
        return rows
