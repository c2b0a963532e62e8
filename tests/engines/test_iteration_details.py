"""The iteration scheduler's decisions step by step, on a paged pool of blocks of 4 slots small enough to count
by hand: what each batch holds, which group is preempted or swapped and when it comes back, what the batch
says about it (counts, contexts, cached prefix tokens, why admission stopped)."""
from pagedbench.engines.config import SchedulerLimits
from pagedbench.engines.kv.paged import PagedKV
from pagedbench.engines.scheduling.iteration import IterationScheduler
from pagedbench.engines.sequence import Sequence, Status, record_tokens
from pagedbench.workloads.request import Request

BS = 4   # slots per block


def seq(i, prompt, output, n=1, **prefix):
    return Sequence(Request(i, 0.0, tuple(range(prompt)), output, n=n, **prefix))


def scheduler(blocks, watermark=0.0, preemption="swap", host_blocks=64, **limits):
    limits.setdefault("max_seq_len", 80)
    kv = PagedKV(blocks * BS, BS, watermark=watermark, num_cpu_blocks=host_blocks)
    return IterationScheduler(kv, SchedulerLimits(**limits), preemption)


def step(sched, now=0.0):
    """One iteration as the engine loop runs it: schedule, every advancing row produces a token, the split is
    read, forks applied, finished requests released. The batch (None if nothing was scheduled)."""
    batch = sched.schedule(now)
    if batch is None:
        return None
    done = record_tokens(batch.advancing(), now + 1.0)
    sched.memory_split()
    sched.after_iteration(batch)
    sched.release_finished(done)
    return batch


def test_a_request_rejected_on_arrival_finishes_at_that_time():
    sched = scheduler(32)
    too_long = seq(0, 60, 30)                     # 90 tokens > max_seq_len 80 (23 of the pool's 32 blocks)
    assert sched.add(too_long, 4.5) is False
    assert too_long.status is Status.REJECTED and too_long.finish_s == 4.5
    assert "max_seq_len" in too_long.rejected_reason
    assert not sched.waiting and not sched.has_work()


def test_two_groups_preempted_in_one_step_are_both_swapped_and_counted():
    """5 blocks: A and B (prompt 7: 2 blocks each, full once prefilled) and C (prompt 2: 1 block). The first
    decode step has no block for A: C, the latest admitted, is swapped out and A takes its block; B then
    finds none and is swapped out itself. Both are counted as swapped, and wait in admission order."""
    sched = scheduler(5)
    a, b, c = seq(0, 7, 4), seq(1, 7, 4), seq(2, 2, 4)
    for s in (a, b, c):
        assert sched.add(s, 0.0)
    prefill = step(sched)
    assert prefill.prefill == [a, b, c] and prefill.prefill_lens == [7, 7, 2]
    assert sched.kv.pool.num_free == 0
    batch = step(sched)
    assert batch.decode == [a]
    assert (batch.preempted, batch.swapped_out, batch.swapped_in) == (2, 2, 0)
    assert list(sched.swapped) == [b, c]
    assert b.status is c.status is Status.SWAPPED and b.swaps == c.swaps == 1
    assert batch.decode_context_lens == [7 + 1]   # A attends over its prompt and its first token
    assert len(batch.swap_out) == 2 + 1           # B's two blocks, C's one
    assert sched.kv.pool.num_free == 2            # C's block went to A; B's two are free


def test_no_group_comes_back_in_a_step_that_preempted_and_it_comes_back_in_the_next():
    """9 blocks, preemption auto. A (prompt 7: 2 blocks), B (prompt 21: 6 blocks), S (2 rows of prompt 2: 1
    shared block). S is swapped out, leaving 1 block free; A takes it in the first decode step, and S (1 block
    plus 2 per row) cannot come back. In the third, B (length 24) needs a block: it is recomputed, freeing 6.
    S would fit now (5 of 6) but a step that preempted brings nothing back: it comes back in the next one."""
    sched = scheduler(9, preemption="auto")
    a, b, s = seq(0, 7, 10), seq(1, 21, 10), seq(2, 2, 10, n=2)
    for r in (a, b, s):
        assert sched.add(r, 0.0)
    assert step(sched).prefill == [a, b, s]
    assert sched._preempt(s) is True                # a group of two rows is swapped
    assert sched.kv.pool.num_free == 1
    first = step(sched)
    assert first.decode == [a, b] and first.swapped_in == 0 and first.preempted == 0
    assert first.admission_blocked_by == ""         # nothing waits: no reason to name
    assert sched.kv.pool.num_free == 0
    second = step(sched)
    assert second.decode == [a, b] and second.swapped_in == 0
    third = step(sched)
    assert third.decode == [a] and third.preempted == 1 and third.swapped_out == 0
    assert third.swapped_in == 0 and list(sched.swapped) == [s]
    assert list(sched.waiting) == [b] and b.status is Status.WAITING
    assert sched.kv.pool.num_free == 6
    fourth = step(sched)
    assert fourth.swapped_in == 1 and fourth.preempted == 0
    assert fourth.decode == [a, s]
    # A: 7 + 4 tokens so far; S's two rows: 2 + 1 each.
    assert fourth.decode_context_lens == [11, 3, 3]
    # B waits behind the group that was swapped: named as such while S is on the host.
    assert fourth.admission_blocked_by == "swapped_first"


def test_a_swapped_group_waits_for_the_watermark_while_others_run_and_comes_back_without_it_when_none_do():
    """20 blocks, a watermark of 2. A (prompt 20: 21 tokens after its prefill, 6 blocks) and G (prompt 47: 48
    tokens, 12 blocks, all full) are admitted together (18 + 2 <= 20). G is swapped out: 14 free. Its way back
    needs its 12 blocks and 1 new for its next token (its table is full): 13, plus the watermark 15 > 14
    while A runs: it waits. Once A finishes, 20 are free and it comes back."""
    sched = scheduler(20, watermark=0.1)
    a, g = seq(0, 20, 3), seq(1, 47, 20)
    for r in (a, g):
        assert sched.add(r, 0.0)
    assert step(sched).prefill == [a, g]
    assert sched._preempt(g) is True
    assert sched.kv.pool.num_free == 14
    first = step(sched)
    assert first.decode == [a] and first.swapped_in == 0 and list(sched.swapped) == [g]
    assert first.admission_blocked_by == ""
    second = step(sched)                             # A's third and last token
    assert second.decode == [a] and second.swapped_in == 0 and a.status is Status.FINISHED
    third = step(sched)
    assert third.decode == [g] and third.swapped_in == 1 and not sched.swapped


def test_a_prefill_counts_only_the_uncached_tokens_against_the_budget_and_reports_them():
    """A token budget of 20. Request 0 (prompt 16, prefix of 12 tokens: 3 full blocks) caches its prefix.
    Request 1 (same prefix, prompt 16) then computes only 4 tokens, so request 2 (prompt 10) joins the same
    prefill: 4 + 10 <= 20 (counting its 16 tokens, it would not: 16 + 10 > 20). The batch says which tokens were cached; a prefill with none cached says none."""
    sched = scheduler(32, max_seq_len=16 + 4, max_num_batched_tokens=20)
    first = seq(0, 16, 4, prefix_id=7, prefix_len=12)
    assert sched.add(first, 0.0)
    alone = step(sched)
    assert alone.prefill == [first] and alone.prefill_cached == []
    second, third = seq(1, 16, 4, prefix_id=7, prefix_len=12), seq(2, 10, 4)
    assert sched.add(second, 1.0) and sched.add(third, 1.0)
    batch = step(sched)
    assert batch.prefill == [second, third] and batch.decode == []
    assert batch.prefill_lens == [16, 10] and batch.prefill_cached == [12, 0]
    assert batch.num_tokens == 4 + 10
    assert batch.admission_blocked_by == ""


def run_to_end(sched, requests, limit=200):
    """Add every request at t = 0 and step until none is left; the batches."""
    for r in requests:
        assert sched.add(r, 0.0)
    batches = []
    while sched.has_work():
        batch = step(sched, now=float(len(batches)))   # iteration i ends at i + 1
        assert batch is not None, "the scheduler holds requests but scheduled nothing"
        batches.append(batch)
        assert len(batches) < limit
    return batches


def test_a_swapped_request_that_needs_the_whole_pool_comes_back_once_the_pool_is_free():
    """20 blocks, no watermark. B (72 + 8 = 80 tokens) needs all 20 blocks by its end, A (2 + 3) 2 at most:
    B is swapped out when they collide, and must come back once A is done. Its way back asks for its blocks and
    what its next step takes (1 new block at most for one row), not a fixed margin that 20 blocks cannot give."""
    sched = scheduler(20, watermark=0.0, preemption="swap")
    a, b = seq(0, 2, 3), seq(1, 72, 8)
    batches = run_to_end(sched, [a, b])
    assert a.status is Status.FINISHED and b.status is Status.FINISHED and b.swaps == 1
    assert sum(x.swapped_in for x in batches) == 1


def test_a_lone_request_short_of_room_for_a_swapped_groups_kept_prefix_lets_that_group_finish_first():
    """10 blocks. G (2 rows, prompt 10 with a cached prefix of 8 tokens, 10 tokens out) is swapped out and keeps
    its 2 prefix blocks on the device; A (3 + 33 = 36 tokens, 9 blocks) then cannot grow past 8 blocks. A is
    preempted (recomputed, or swapped), G comes back in that step or the next, finishes, and A after it."""
    for preemption in ("auto", "swap"):
        sched = scheduler(10, watermark=0.0, preemption=preemption)
        a, g = seq(0, 3, 33), seq(1, 10, 10, n=2, prefix_id=0, prefix_len=8)
        run_to_end(sched, [a, g])
        assert a.status is Status.FINISHED and g.status is Status.FINISHED, preemption
        assert a.finish_s > g.finish_s and a.preemptions >= 1 and g.swaps >= 1, preemption


def test_two_swapped_requests_whose_kept_prefixes_block_each_other_both_finish():
    """10 blocks, two requests of different cached prefixes (2 and 1 blocks) that each need most of the pool.
    Each ends up swapped out holding its prefix blocks on the device, where they take the room the other needs
    to come back: with nothing running, the later one's kept blocks move to the host and the oldest returns."""
    for preemption in ("swap", "auto"):
        sched = scheduler(10, watermark=0.0, preemption=preemption)
        a, b = seq(0, 17, 21, prefix_id=0, prefix_len=8), seq(1, 19, 21, prefix_id=1, prefix_len=4)
        run_to_end(sched, [a, b])
        assert a.status is Status.FINISHED and b.status is Status.FINISHED, preemption
        assert not sched.kv.cpu_tables and not sched.kv.swap_kept, preemption


def test_with_nothing_running_the_oldest_swapped_group_comes_back_without_the_watermark():
    """12 blocks. H (prompt 35: 36 tokens, 9 full blocks) and P (prompt 10 with a cached prefix of 8 tokens: 2
    prefix blocks and 1 more) are both swapped out; P keeps its 2 prefix blocks on the device: 10 free. H needs
    its 9 blocks and 1 for its next token: 10, all that is free. With a watermark of 1 it would not fit; with
    nothing running it comes back all the same, ahead of P."""
    kv = PagedKV(12 * BS, BS, watermark=0.0, num_cpu_blocks=64)
    sched = IterationScheduler(kv, SchedulerLimits(max_seq_len=80), "swap")
    h, p = seq(0, 35, 4), seq(1, 10, 10, prefix_id=0, prefix_len=8)
    for s in (h, p):
        assert kv.try_admit(s)
        kv.prefilled(s)
        s.generated = 1
    assert kv.pool.num_free == 0
    kv.watermark_blocks = 1
    for s in (p, h):
        kv.swap_out(s)
        s.status = Status.SWAPPED
        sched.swapped.appendleft(s)
    assert kv.pool.num_free == 10 and list(sched.swapped) == [h, p]
    assert not kv.can_swap_in(h) and kv.can_swap_in(h, watermark=False)
    batch = sched.schedule(0.0)
    assert batch.decode == [h] and batch.swapped_in == 1 and list(sched.swapped) == [p]


def test_with_nothing_running_and_nothing_fitting_later_groups_spill_their_kept_prefix_for_the_oldest():
    """12 blocks. P (prompt 47 with a cached prefix of 8 tokens: 48 tokens, 12 full blocks) is swapped out and
    keeps its 2 prefix blocks on the device; H then grows to the 10 others (40 tokens) and is swapped out too.
    Neither fits what is free (10): each needs its blocks and 1 for its next token, 11. P's kept blocks move to
    the host (the cache keeps them, evictable): 12 of room, and H (the oldest) comes back, leaving no watermark
    (2 blocks) since nothing else runs."""
    kv = PagedKV(12 * BS, BS, watermark=0.0, num_cpu_blocks=64)
    sched = IterationScheduler(kv, SchedulerLimits(max_seq_len=80), "swap")
    h, p = seq(0, 3, 40), seq(1, 47, 10, prefix_id=0, prefix_len=8)
    assert kv.try_admit(p)
    kv.prefilled(p)
    p.generated = 1
    kv.swap_out(p)
    prefix = list(kv.prefix_blocks[0])
    assert kv.swap_kept == {p.id: prefix} and kv.pool.num_free == 10
    assert kv.try_admit(h)
    kv.prefilled(h)
    h.generated = 1
    while h.prompt_len + h.generated < 39:
        h.generated += 1
        assert kv.grow_all([h]) == 1
    assert len(kv.block_tables[h.id][0]) == 10 and kv.pool.num_free == 0
    h.generated += 1                                  # its 40th token stored: the next needs an 11th block
    assert kv.grow_all([h]) == 0
    kv.swap_out(h)
    kv.watermark_blocks = 2
    for s in (p, h):
        s.status = Status.SWAPPED
        sched.swapped.appendleft(s)
    assert not kv.can_swap_in(h, watermark=False) and not kv.can_swap_in(p, watermark=False)
    batch = sched.schedule(0.0)
    assert batch.decode == [h] and batch.swapped_in == 1 and list(sched.swapped) == [p]
    # P's 2 prefix blocks copied to the host, after the two swap-outs set up here (not drained by a step).
    # (H's way back then evicted that prefix from the cache: it needed 11 of the 12.)
    assert p.id not in kv.swap_kept and [a for a, _ in batch.swap_out[-2:]] == prefix and 0 not in kv.prefix_blocks
