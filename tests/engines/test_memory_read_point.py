"""When a run reads its KV memory: as the forward pass saw it, after copy-on-write, not after a beam fork.

A beam step re-forms the rows so that several share their parent's last block; the next step copies that
block before any forward pass uses it. Read after the fork, the shared block is counted once and the saving
looks larger than any forward pass ever had.
"""
import random

import pytest

from pagedbench.engines.build import build_scheduler
from pagedbench.engines.config import SchedulerLimits
from pagedbench.engines.registry import engine_config
from pagedbench.engines.loop import run_engine
from pagedbench.results.record.frames import iterations_frame, requests_frame
from pagedbench.results.record.summary import summarize
from tests.engines.conftest import UnitExecutor
from pagedbench.workloads.request import Request


class ForkingExecutor(UnitExecutor):
    """Chooses each beam step's parents (every new beam extends beam 0, or random ones) and records the KV
    usage each iteration's forward pass runs with: (slots without sharing, slots allocated)."""

    def __init__(self, kv, rng=None):
        super().__init__()
        self.kv, self.rng, self.seen = kv, rng, []

    def execute(self, batch):
        self.seen.append(self.kv.usage())
        for seq in batch.prefill:
            if seq.beam:
                seq.parents = [0] * seq.width
        for seq in batch.decode:
            if seq.beam:
                draw = (lambda: self.rng.randrange(seq.width)) if self.rng else (lambda: 0)
                seq.parents = sorted(draw() for _ in range(seq.width))
        return super().execute(batch)


def beam_run(engine, requests, capacity, rng=None):
    scheduler = build_scheduler(engine_config(engine), SchedulerLimits(max_seq_len=128), capacity)
    executor = ForkingExecutor(scheduler.kv, rng)
    return run_engine(requests, scheduler, executor, progress=False), executor


def beams(n, width, prompt_len, output_len):
    return [Request(i, 0.0, tuple(range(prompt_len)), output_len, beam_width=width) for i in range(n)]


def test_each_row_counts_its_copied_last_block():
    # One beam request of width 3, blocks of 4, prompt of 5: after every step all beams extend beam 0, so a
    # fork leaves the three rows sharing a partly filled last block, which the next step copies.
    record, executor = beam_run(dict(name="paged", block_size=4, watermark=0.0), beams(1, 3, 5, 6), 4096)
    for row, seen in zip(record.iterations, executor.seen):
        assert (row.unshared_slots, row.allocated_slots) == seen
    # Two positions written after the prompt (5 + 2 = 7 slots in 2 blocks): the prompt's first block shared,
    # the second copied per row, so 1 + 3 blocks; read after the fork it would be 2.
    assert record.iterations[2].allocated_slots == 4 * 4


@pytest.mark.parametrize("seed", range(5))
def test_usage_read_is_the_forward_pass_usage_for_random_beams(seed):
    rng = random.Random(seed)
    reqs = [Request(i, rng.uniform(0, 5), tuple(range(rng.randint(1, 20))), rng.randint(2, 20),
                    beam_width=rng.choice([2, 3, 4])) for i in range(12)]
    record, executor = beam_run(dict(name="paged", block_size=4, watermark=0.0), reqs, 4096, rng)
    assert [(r.unshared_slots, r.allocated_slots) for r in record.iterations] == executor.seen


def test_saving_of_a_beam_run_counts_the_copies():
    # All beams extend beam 0 every step: rows share everything but their last (copied) block, so the
    # saving is below the one read after each fork, when all rows also share that block.
    record, _ = beam_run(dict(name="paged", block_size=4, watermark=0.0), beams(1, 4, 6, 9), 4096)
    s = summarize(iterations_frame(record), requests_frame(record), warmup_fraction=0.0)
    for k, row in enumerate(record.iterations[1:], start=1):
        fed, produced = 6 + k - 1, 6 + k                     # the positions the k-th decode step writes
        shared = fed // 4                                     # full blocks before the one written into
        private = produced // 4 - fed // 4 + 1                # per row: the copied block, and a new one
        assert row.allocated_slots == 4 * (shared + 4 * private)
    assert 0 < s["memory_saving"] < 1
