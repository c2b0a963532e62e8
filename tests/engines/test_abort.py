"""Scheduler.abort: a request dropped between steps (a server's client went away) leaves nothing behind."""
from __future__ import annotations

import pytest

from pagedbench.engines.build import build_scheduler
from pagedbench.engines.config import ContiguousEngineConfig, PagedEngineConfig, SchedulerLimits
from pagedbench.engines.engine import Engine
from pagedbench.engines.sequence import Status
from tests.engines.conftest import UnitExecutor
from pagedbench.workloads.request import Request

LIMITS = SchedulerLimits(max_num_seqs=16, max_num_batched_tokens=256, max_seq_len=256)
HOST_BLOCKS = 16
BYTES_PER_SLOT = 2**30 // (4 * HOST_BLOCKS)        # a 1 GiB swap space of 16 blocks of 4 slots


@pytest.mark.parametrize("n, prefix", [(1, False), (2, False), (1, True)],
                         ids=["one row", "two samples sharing the prompt", "a cached prefix kept on the device"])
def test_a_swapped_out_request_is_dropped_at_once_and_its_host_blocks_freed(n, prefix):
    engine_config = PagedEngineConfig(block_size=4, watermark=0.0, preemption="swap", swap_space=1.0)
    scheduler = build_scheduler(engine_config, LIMITS, 64, BYTES_PER_SLOT)
    kv, executor = scheduler.kv, UnitExecutor()
    engine = Engine(scheduler, executor)
    output_len = 16 if n > 1 else 40                   # a group must fit the pool alone: 2 x 7 blocks of 4
    seqs = []
    for i in range(2):
        seqs.append(engine.add(Request(i, 0.0, tuple(range(12)), output_len, n=n, prefix_id=0 if prefix else None,
                                       prefix_len=8 if prefix else 0), 0.0)[0])
        if prefix and i == 0:
            engine.step(0.0)                           # its prefill caches the prefix the second then maps
    for _ in range(500):
        if scheduler.swapped:
            break
        engine.step(executor.now())
    (swapped,) = scheduler.swapped
    assert kv.cpu_pool.num_free < HOST_BLOCKS and swapped.status == Status.SWAPPED
    if prefix:
        assert kv.swap_kept.get(swapped.id)              # the group keeps the cached prefix on the device
    assert scheduler.abort(swapped, "gone")
    assert swapped.status == Status.FAILED and swapped.rejected_reason == "gone"
    assert not scheduler.swapped and kv.cpu_pool.num_free == HOST_BLOCKS and not kv.cpu_tables and not kv.swap_kept
    while scheduler.has_work():
        engine.step(executor.now())
    (other,) = [s for s in seqs if s is not swapped]
    assert other.status == Status.FINISHED and other.generated == output_len
    assert kv.usage() == (0, 0) and kv.pool.num_free + kv.pool.num_cached == kv.pool.num_blocks


def test_a_running_or_waiting_request_is_dropped_and_its_memory_freed():
    scheduler = build_scheduler(PagedEngineConfig(block_size=4, watermark=0.0, swap_space=0), LIMITS, 64)
    executor = UnitExecutor()
    engine = Engine(scheduler, executor)
    running, waiting = (engine.add(Request(i, 0.0, tuple(range(40)), 20), 0.0)[0] for i in range(2))
    engine.step(0.0)                                   # the first is prefilled; the second does not fit
    assert list(scheduler.held()) == [running] and list(scheduler.waiting) == [waiting]
    assert scheduler.abort(waiting, "gone") and scheduler.abort(running, "gone")
    assert not scheduler.has_work() and scheduler.kv.usage() == (0, 0)
    assert running.status == waiting.status == Status.FAILED


def test_static_batching_drops_a_waiting_request_and_runs_a_batch_member_on():
    scheduler = build_scheduler(ContiguousEngineConfig("static"), LIMITS, 300)
    engine = Engine(scheduler, UnitExecutor())
    member, queued = (engine.add(Request(i, 0.0, tuple(range(10)), 5), 0.0)[0] for i in range(2))
    engine.step(0.0)
    assert queued in scheduler.waiting                                             # the batch is full
    assert scheduler.abort(queued, "gone") and queued.status == Status.FAILED
    assert queued.rejected_reason == "gone" and queued not in scheduler.waiting
    assert scheduler.abort(member, "gone") and member.status != Status.FAILED     # runs to its batch's end
    assert member.rejected_reason is None
