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
and what to do with the output: `pagedbench.engines.loop.run_engine` replays a trace,
`pagedbench.engines.serving.online_loop.serve_loop` takes requests from an inbox.

`Engine.fast_forward` runs what would follow a quiet decode step (every
running group one row, nothing preempted, copied or swapped) until the next
event: a request arrives (the driver's `may_start` says no) or finishes, a
step would need a block that is not there, or a region would fill. Those
steps repeat the last batch with every context one token longer, so their
times come from the cost model in closed form (`Executor.quiet_decodes`),
their blocks are taken in the step-by-step order, and each gets its row and
split as `step` would record them (the split read after each step that took
a block; in a step that took none, only the stored tokens moved: the row
before's token states plus one per row, its reservation less as much); the
sequences get their tokens at the end. The same run, step for step (`backend.fast_forward=false` keeps the
step-by-step path; tests/engines/test_fast_forward.py holds the two equal).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pagedbench.engines.batch import Batch
from pagedbench.engines.protocols import Executor, Scheduler
from pagedbench.engines.run_record import IterationRow
from pagedbench.engines.sequence import Sequence, record_tokens
from pagedbench.workloads.request import Request


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


def memory_values(scheduler: Scheduler) -> tuple[int, ...]:
    """`memory_fields` as a tuple, in the row's order (unshared_slots ... free)."""
    split = scheduler.memory_split()
    return (*scheduler.kv.usage(), split.token_states, split.reservation, split.internal_fragmentation,
            split.external_fragmentation, split.free)


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
        memory = memory_values(scheduler)
        scheduler.after_iteration(batch)
        held = len(scheduler.held())
        finished = scheduler.release_finished(done_now)
        row = IterationRow(     # positional, in the fields' order (the hot path): start_s ... num_swapped,
            start, duration, len(batch.prefill), sum(batch.prefill_lens), len(batch.decode),   # then the memory
            len(batch.decode_context_lens), batch.num_seqs, held, len(scheduler.waiting), batch.preempted,
            batch.num_rows, batch.copy_tokens, batch.swapped_out, batch.swapped_in,
            len(batch.swap_out) + len(batch.swap_in), len(scheduler.swapped), batch.admission_blocked_by, *memory)
        return StepOutput(row, batch, advanced, finished)

    def fast_forward(self, may_start: Callable[[float], bool]) -> list[IterationRow]:
        """After a quiet decode step: run the steps that repeat it while `may_start(clock)` holds and no event
        comes (see the module's docstring); their rows (none if the engine is not in a quiet stretch)."""
        scheduler, executor = self.scheduler, self.executor
        quiet = scheduler.quiet() if executor.fast_forward else None
        if quiet is None:
            return []
        seqs, blocked_by = quiet
        steps = min([s.output_len - s.generated for s in seqs]) - 1   # the step a group finishes in is an event
        if steps <= 0 or not may_start(executor.now()):              # (quiet_decodes' own first check)
            return []
        kv = scheduler.kv
        firsts, period = kv.growths(seqs)
        if period == 0:                                              # no block is taken: no step past a first
            steps = min(steps, min(firsts))
            takes = []
        else:                                                        # (step, group) of each block taken, in order
            takes = sorted((j, i) for i, first in enumerate(firsts) if first < steps
                           for j in range(first, steps, period))
        if steps <= 0:
            return []
        if len(takes) > kv.available_blocks:                         # the step short of a block preempts
            steps = min(steps, takes[kv.available_blocks][0])
        if steps <= 0:
            return []
        ran = executor.quiet_decodes([s.prompt_len + s.generated for s in seqs], steps, may_start)
        rows, n, waiting, taken, memory = [], len(seqs), len(scheduler.waiting), 0, None
        for j, (start, duration, _) in enumerate(ran):
            grew = False
            while taken < len(takes) and takes[taken][0] == j:
                kv.append_block(seqs[takes[taken][1]])
                taken += 1
                grew = True
            scheduler.quiet_step()
            if memory is None or grew:
                memory = memory_values(scheduler)
            else:   # no block taken: each row stored its token in a slot it held, and nothing else moved
                unshared, allocated, token_states, reservation, internal, external, free = memory
                memory = (unshared, allocated, token_states + n, reservation - n, internal, external, free)
            rows.append(IterationRow(start, duration, 0, 0, n, n, n, n, waiting, 0, n, 0, 0, 0, 0, 0, blocked_by,
                                     *memory))
        if ran:
            ends = [end for _, _, end in ran]
            for seq in seqs:
                seq.generated += len(ran)
                seq.token_times_s.extend(ends)
        return rows
