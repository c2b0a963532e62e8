"""What apply_forks, the admission rule and small allocator edges decide, each checked where a one-character
slip (a >= for a >, a True for a False, a default off by one) changes the outcome."""
from collections import deque

import pytest

from pagedbench.engines.batch import Batch
from pagedbench.engines.config import PagedEngineConfig, SchedulerLimits
from pagedbench.engines.kv.arena import ContiguousArena
from pagedbench.engines.kv.block_pool import BlockPool
from pagedbench.engines.kv.contiguous import ContiguousKV
from pagedbench.engines.kv.reservation import Reservation
from pagedbench.engines.scheduling.admission import queue_or_reject, rejection_reason
from pagedbench.engines.scheduling.forks import apply_forks
from pagedbench.engines.sequence import Sequence, Status
from pagedbench.workloads.request import Request


def group(i, prompt_len, output_len, n):
    return Sequence(Request(i, 0.0, tuple(range(prompt_len)), output_len, n=n))


@pytest.mark.parametrize("n, copied", [(1, 0), (2, 4), (3, 8)])
def test_after_a_groups_prefill_each_other_row_gets_the_prompt(n, copied):
    kv = ContiguousKV(4096, Reservation.MAX, max_seq_len=64)
    seq = group(0, 5, 4, n)
    assert kv.try_admit(seq)
    seq.parents = [0] * n if n > 1 else None
    apply_forks(kv, Batch(prefill=[seq], prefill_lens=[5]))
    out = Batch()
    kv.drain_into(out)
    # The prompt's cached positions (all but its last, which each row's first decode step writes) into each
    # of the n - 1 other rows' regions.
    assert out.copy_tokens == copied
    assert seq.parents is None                # the prefill's lineage is applied once, then cleared


def test_a_decoded_groups_parents_are_applied_and_cleared():
    kv = ContiguousKV(4096, Reservation.MAX, max_seq_len=64)
    seq = group(0, 5, 4, 2)
    assert kv.try_admit(seq)
    apply_forks(kv, Batch(prefill=[seq], prefill_lens=[5]))
    seq.parents = [0, 0]
    apply_forks(kv, Batch(decode=[seq], decode_context_lens=[6, 6]))
    assert seq.parents is None


def test_a_group_wider_than_the_row_cap_is_rejected_with_its_reason():
    kv = ContiguousKV(4096, Reservation.MAX, max_seq_len=64)
    limits = SchedulerLimits(max_num_seqs=2, max_num_batched_tokens=64, max_seq_len=64)
    assert rejection_reason(group(0, 5, 4, 2), kv, limits) is None
    assert rejection_reason(group(1, 5, 4, 3), kv, limits) == "runs 3 sequences; max_num_seqs is 2"
    # A request too long for max_seq_len is named for that first, whatever its width.
    assert "exceeds max_seq_len 64" in rejection_reason(group(2, 60, 10, 3), kv, limits)


def test_queue_or_reject_says_which_it_did():
    kv = ContiguousKV(4096, Reservation.MAX, max_seq_len=64)
    limits = SchedulerLimits(max_num_seqs=2, max_num_batched_tokens=64, max_seq_len=64)
    waiting = deque()
    ok, wide = group(0, 5, 4, 1), group(1, 5, 4, 3)
    assert queue_or_reject(ok, waiting, kv, limits, 1.5) is True and list(waiting) == [ok]
    assert queue_or_reject(wide, waiting, kv, limits, 2.5) is False and list(waiting) == [ok]
    assert (wide.status, wide.finish_s) == (Status.REJECTED, 2.5)


def test_a_block_of_one_slot_is_allowed():
    pool = BlockPool(4, 1)
    assert pool.allocate() in range(4)
    with pytest.raises(ValueError, match="power of two"):
        BlockPool(4, 3)


def test_an_arena_is_buddy_by_default_and_nothing_waiting_finds_no_hole_too_small():
    arena = ContiguousArena(64)
    assert arena.allocator_name == "buddy"
    arena.allocate(0, 8)
    arena.allocate(1, 8)
    arena.free(0)                              # a hole of 8 at the start; 48 free after the second region
    assert arena.unusable_free(0) == 0         # nothing waits: no free slot is unusable
    assert arena.unusable_free(1) == 0         # a region of 1 fits any hole
    assert arena.unusable_free(9) == 8         # a region of 16 does not fit the hole of 8


def static_scheduler(capacity=4096):
    from pagedbench.engines.scheduling.static import StaticScheduler

    limits = SchedulerLimits(max_num_seqs=4, max_num_batched_tokens=64, max_seq_len=64)
    return StaticScheduler(ContiguousKV(capacity, Reservation.MAX, max_seq_len=64), limits)


def test_static_names_a_blocking_limit_only_when_someone_waits():
    sched = static_scheduler()
    a, b = group(0, 5, 2, 1), group(1, 5, 2, 1)
    assert sched.add(a, 0.0) and sched.add(b, 0.0)
    first = sched.schedule(0.0)
    assert first.admission_blocked_by == ""          # everyone who waited joined the batch
    assert sched.schedule(0.1).admission_blocked_by == ""   # the batch runs; nobody waits
    late = group(2, 5, 2, 1)
    assert sched.add(late, 0.2)
    assert sched.schedule(0.2).admission_blocked_by == "batch_running"


def test_static_rejects_on_arrival_at_that_time():
    sched = static_scheduler()
    too_long = group(0, 60, 10, 1)
    assert sched.add(too_long, 3.25) is False
    assert (too_long.status, too_long.finish_s) == (Status.REJECTED, 3.25)


def serve_paged(requests, capacity, host_blocks=512, **engine):
    from pagedbench.engines.build import build_scheduler
    from pagedbench.engines.run_record import ITERATION_COLUMNS
    from pagedbench.engines.loop import run_engine
    from tests.engines.conftest import UnitExecutor

    limits = SchedulerLimits(max_num_seqs=64, max_num_batched_tokens=256, max_seq_len=64)
    # One byte per slot: a host pool of `host_blocks` blocks of 4 slots.
    scheduler = build_scheduler(PagedEngineConfig(block_size=4, watermark=0.0,
                                             swap_space=host_blocks * 4 / 2**30, **engine),
                                limits, capacity, bytes_per_slot=1)

    def statuses_match_queues(row):   # after every iteration, each queue holds sequences of its own status
        assert all(s.status is Status.SWAPPED for s in scheduler.swapped)
        assert all(s.status is Status.WAITING for s in scheduler.waiting)
        assert all(s.status is Status.RUNNING for s in scheduler.held())
    record = run_engine(requests, scheduler, UnitExecutor(), progress=False, on_iteration=statuses_match_queues)
    column = {c: i for i, c in enumerate(ITERATION_COLUMNS)}
    return record, (lambda name: sum(r[column[name]] for r in record.iterations))


def test_every_preemption_is_counted_once_on_its_sequence_and_its_iteration():
    singles = [Request(i, 0.0, tuple(range(4)), 20) for i in range(6)]
    record, total = serve_paged(singles, capacity=48)            # 12 blocks: three requests' final 6 blocks
    preemptions = [s.preemptions for s in record.sequences]
    assert max(preemptions) >= 2                                  # some request is preempted more than once
    assert total("preempted") == sum(preemptions)
    assert all(s.swaps == 0 for s in record.sequences)           # single sequences are recomputed (auto)
    assert all(s.status is Status.FINISHED and s.generated == 20 for s in record.sequences)


def test_a_preempted_group_is_swapped_and_each_swap_counted_once():
    groups = [Request(i, 0.0, tuple(range(4)), 20, n=2) for i in range(4)]
    record, total = serve_paged(groups, capacity=64)
    swaps = [s.swaps for s in record.sequences]
    assert max(swaps) >= 2 and total("swapped_out") == sum(swaps) == total("swapped_in")
    assert total("preempted") == sum(s.preemptions for s in record.sequences) >= sum(swaps)
    assert all(s.status is Status.FINISHED for s in record.sequences)


def test_a_single_sequence_the_full_host_pool_cannot_take_is_recomputed_instead():
    singles = [Request(i, 0.0, tuple(range(4)), 20) for i in range(6)]
    record, total = serve_paged(singles, capacity=48, host_blocks=1, preemption="swap")
    assert total("preempted") > 0 and total("swapped_out") == 0
    assert all(s.swaps == 0 and s.status is Status.FINISHED for s in record.sequences)


def test_a_group_the_full_host_pool_cannot_take_stops_the_run_with_its_reason():
    groups = [Request(i, 0.0, tuple(range(4)), 20, n=2) for i in range(4)]
    with pytest.raises(RuntimeError, match="must be swapped out but the host pool cannot hold it"):
        serve_paged(groups, capacity=64, host_blocks=1)
