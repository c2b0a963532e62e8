"""The simulated executor: each iteration takes as long as the cost model says, on a virtual clock.

An iteration's time is the cost model's time for its batch with the KV data
it moves (`TransferModel`) and, between iterations, the host time a fitted
preset measured on the real backend (`scheduler_s`). Device copies
(copy-on-write, contiguous forks) run on the compute stream before the
forward pass and add to it; swaps overlap it layer by layer or run before it,
as the hardware preset's `host_transfer_overlap` says
(`TransferModel.iteration_time`). A beam search's surviving beams come from
the seeded `BeamModel`.
"""
from __future__ import annotations

from collections.abc import Callable

from pagedbench.engines.batch import Batch
from pagedbench.engines.sim.beam_model import BeamModel
from pagedbench.engines.sim.cost_model import blocks_read


class SimExecutor:
    name = "sim"

    def __init__(self, cost_model, transfers=None, beams: BeamModel | None = None, fast_forward: bool = True):
        self.cost_model = cost_model
        self.transfers = transfers
        self.beams = beams if beams is not None else BeamModel()
        self.clock = 0.0
        self.fast_forward = fast_forward   # the engine may run quiet decode steps through `quiet_decodes`

    def start_clock(self) -> None:
        self.clock = 0.0

    def warmup(self) -> None:
        """Nothing to warm up: no device runs."""

    def now(self) -> float:
        return self.clock

    def execute(self, batch: Batch) -> float:
        """Advance the virtual clock by the host's time since the last iteration (the cost model's
        `scheduler_s`, 0 unless measured), then by the iteration's modelled time; return the latter."""
        self.clock += self.cost_model.scheduler_s
        if batch.prefill_cached:
            duration = self.cost_model.iteration_time(batch.computed_prefill_lens, batch.decode_context_lens,
                                                      batch.prefill_cached)
        else:
            duration = self.cost_model.iteration_time(batch.prefill_lens, batch.decode_context_lens)
        if batch.copy_tokens or batch.swap_out or batch.swap_in:
            if self.transfers is None:
                raise ValueError("this iteration moves KV data but the sim executor has no transfer model")
            compute = duration + self.transfers.copy_time(batch.copy_tokens)
            duration = self.transfers.iteration_time(compute, len(batch.swap_out), len(batch.swap_in))
        for seq in batch.prefill:
            if seq.beam:
                seq.parents = [0] * seq.width
        for seq in () if batch.single_rows else batch.decode:
            if seq.beam:
                seq.parents = self.beams.parents(seq.id, seq.width)
                if seq.generated + 1 >= seq.output_len:   # its last step: its draws are done
                    self.beams.forget(seq.id)
        self.clock += duration
        return duration

    def quiet_decodes(self, context_lens: list[int], steps: int,
                      may_start: Callable[[float], bool]) -> list[tuple[float, float, float]]:
        """Run up to `steps` decode-only iterations of rows whose contexts start at `context_lens` and grow by
        one token a step (nothing copied or swapped), each only if `may_start(clock)`; the (start, duration,
        end) of each. The clock moves exactly as `execute` would move it for the same batches."""
        cost, bs = self.cost_model, self.cost_model.block_size
        rows, context = len(context_lens), sum(context_lens)
        blocks, residues = 0, None
        if bs:
            blocks = blocks_read(context_lens, bs)
            residues = [0] * bs          # rows by context mod bs: a row reads one more block after a multiple
            for n in context_lens:
                residues[n % bs] += 1
        ran = []
        for j in range(steps):
            start = self.clock
            if not may_start(start):
                break
            self.clock += cost.scheduler_s
            duration = cost.decode_time(rows, context, blocks)
            self.clock += duration
            ran.append((start, duration, self.clock))
            context += rows
            if bs:
                blocks += residues[-j % bs]
        return ran

    def wait_until(self, t: float) -> None:
        """Idle time costs nothing to simulate: jump to the next arrival."""
        self.clock = max(self.clock, t)
