"""Exact edge behaviour of the paged KV manager on small hand-built layouts.

Each test builds a pool of a few blocks, drives PagedKV through admission,
prefill, decode steps, forks, eviction and swapping, and checks the values
worked out by hand in its comments: defaults, messages, which prefixes are
evicted and in what order, the copy-on-write count at a block boundary, the
room a swap needs, the cache slots a row reads, and the prefix tokens a
request is told it need not prefill.
"""
from __future__ import annotations

import pytest

from pagedbench.engines.kv.paged import PagedKV
from tests.engines.test_sharing import admit_and_prefill, check_invariants, drained, group


def cache_prefix(kv: PagedKV, i: int, prefix_id: int, prompt_len: int = 6, prefix_len: int = 4) -> None:
    """Serve one request of `prefix_id` up to its prefill and free it: the cache keeps its full prefix blocks."""
    seq = group(i, prompt_len, 2, prefix_id=prefix_id, prefix_len=prefix_len)
    assert kv.try_admit(seq)
    kv.prefilled(seq)
    kv.free(seq)


# -- construction and messages ---------------------------------------------------------------------------


def test_default_watermark_is_one_percent_of_the_pool_and_there_is_no_host_pool():
    kv = PagedKV(200 * 4, block_size=4)                    # 200 blocks
    assert kv.watermark_blocks == 2
    assert kv.cpu_pool is None and kv.host_blocks == 0


def test_a_host_pool_of_one_block_exists():
    kv = PagedKV(16, block_size=4, num_cpu_blocks=1)
    assert kv.host_blocks == 1 and kv.cpu_pool is not None


def test_describe_names_the_pool_the_watermark_and_the_host_pool():
    assert PagedKV(1000 * 16, block_size=16).describe() == (
        "block pool of 1,000 blocks x 16 slots, admission watermark 10 blocks, no host pool")
    assert PagedKV(1000 * 16, block_size=16, watermark=0.0, num_cpu_blocks=2048).describe() == (
        "block pool of 1,000 blocks x 16 slots, admission watermark 0 blocks, host pool of 2,048 blocks")


def test_rejection_message_counts_blocks_and_names_unshared_rows_only_for_groups():
    kv = PagedKV(8, block_size=4, watermark=0.0)           # 2 blocks
    # 7 + 3 = 10 tokens: 3 blocks of 4.
    assert kv.rejection(group(0, 7, 3)) == "needs 3 blocks of 4 slots; the pool has 2"
    # Two rows of 3 + 2 = 5 tokens: 2 blocks each, 4 in all, counted as if nothing were shared.
    assert kv.rejection(group(1, 3, 2, width=2)) == "needs 4 blocks of 4 slots (2 rows, unshared); the pool has 2"
    assert kv.rejection(group(2, 3, 1, width=2)) is None   # 2 rows of 1 block
    assert kv.rejection(group(3, 5, 3)) is None            # 8 tokens: 2 blocks


def test_a_group_that_has_generated_cannot_be_admitted_again():
    kv = PagedKV(64, block_size=4, watermark=0.0)
    seq = group(0, 5, 4, width=2)
    seq.generated = 1
    with pytest.raises(RuntimeError, match="must be swapped"):
        kv.try_admit(seq)
    assert kv.pool.num_free == 16 and not kv.block_tables


# -- token states of shared blocks -------------------------------------------------------------------


def test_a_group_not_yet_prefilled_does_not_hide_the_pending_token_of_a_later_group():
    kv = PagedKV(16 * 4, block_size=4, watermark=0.0)
    a = group(0, 5, 4, width=2)     # admitted, not prefilled: its rows share 2 blocks holding 5 prompt tokens
    b = group(1, 5, 4, width=2)     # prefilled: both rows' first token at position 5, in their shared block 1
    assert kv.try_admit(a) and kv.try_admit(b)
    kv.prefilled(b)
    b.generated = 1
    split = kv.split([a, b], None)
    # a: 5 slots. b: 5 prompt slots + one slot for the two rows' position 5 until the block is copied.
    assert split.token_states == 5 + 6
    assert split.reservation + split.internal_fragmentation == 4 * 4 - 11
    check_invariants(kv, [a, b])


# -- the prefix cache: caching, eviction, LRU order -----------------------------------------------------


def test_a_prefix_of_exactly_one_block_is_cached():
    kv = PagedKV(8 * 4, block_size=4, watermark=0.0)
    seq = group(0, 6, 2, prefix_id=3, prefix_len=4)
    assert kv.try_admit(seq)
    first = kv.block_tables[seq.id][0][0]
    kv.prefilled(seq)
    assert kv.prefix_blocks == {3: [first]}
    assert kv.pool.ref_counts[first] == 2


def test_eviction_frees_the_least_recently_used_prefixes_and_no_more():
    kv = PagedKV(6 * 4, block_size=4, watermark=0.0)       # 6 blocks
    for i, prefix_id in enumerate((1, 2, 3)):
        cache_prefix(kv, i, prefix_id)                     # each leaves 1 cached block
    assert list(kv.prefix_blocks) == [1, 2, 3] and kv.pool.num_free == 3
    # 19 tokens: 5 blocks, 2 more than are free: prefixes 1 and 2 go, 3 stays.
    seq = group(9, 19, 1)
    assert kv.try_admit(seq)
    assert list(kv.prefix_blocks) == [3]
    assert kv.pool.num_free == 0
    check_invariants(kv, [seq])


def test_a_single_row_growing_into_a_full_pool_evicts_one_unused_prefix():
    kv = PagedKV(3 * 4, block_size=4, watermark=0.0)       # 3 blocks
    cache_prefix(kv, 0, prefix_id=1)                       # 1 cached block, 2 free
    seq = group(1, 7, 4)
    assert kv.try_admit(seq) and kv.pool.num_free == 0     # 7 tokens in 2 blocks, nothing evicted
    assert kv.prefix_blocks
    seq.generated = 1                                      # position 8 needs a third block
    assert kv.grow_all([seq]) == 1
    assert len(kv.block_tables[seq.id][0]) == 3
    assert kv.prefix_blocks == {}
    check_invariants(kv, [seq])


def test_cached_tokens_are_forgotten_after_prefill():
    kv = PagedKV(8 * 4, block_size=4, watermark=0.0)
    cache_prefix(kv, 0, prefix_id=1)
    seq = group(1, 6, 2, prefix_id=1, prefix_len=4)
    assert kv.try_admit(seq)
    assert kv.cached_tokens(seq) == 4
    kv.prefilled(seq)
    assert kv.cached_tokens(seq) == 0


def test_a_request_readmitted_after_its_prefix_was_evicted_has_no_cached_tokens():
    """Preemption by recompute frees a request and admits it again later: if its prefix was evicted
    meanwhile, its whole prompt must be prefilled."""
    kv = PagedKV(4 * 4, block_size=4, watermark=0.0)       # 4 blocks
    cache_prefix(kv, 0, prefix_id=1)
    seq = group(1, 6, 2, prefix_id=1, prefix_len=4)
    assert kv.try_admit(seq) and kv.cached_tokens(seq) == 4
    kv.free(seq)
    big = group(2, 15, 1)                                  # 4 blocks, 3 free: the prefix's block is evicted
    assert kv.try_admit(big) and kv.prefix_blocks == {}
    kv.free(big)
    assert kv.try_admit(seq)
    assert kv.cached_tokens(seq) == 0


def test_grow_all_readies_only_the_groups_from_start_on():
    kv = PagedKV(8 * 4, block_size=4, watermark=0.0)
    a, b = group(0, 3, 4), group(1, 3, 4)
    assert kv.try_admit(a) and kv.try_admit(b)
    a.generated = b.generated = 1                          # both need a second block for position 4
    assert kv.grow_all([a, b], 1) == 2
    assert len(kv.block_tables[a.id][0]) == 1
    assert len(kv.block_tables[b.id][0]) == 2


# -- copy-on-write at a block boundary ------------------------------------------------------------------


def test_rows_writing_into_their_own_first_block_need_no_copy_and_no_free_block():
    kv = PagedKV(3 * 4, block_size=4, watermark=0.0)       # 3 blocks
    seq = group(0, 4, 3, width=2)
    # The 4-token prompt fills block 0 (shared); each row's first token starts a block of its own.
    assert kv.try_admit(seq) and kv.pool.num_free == 0
    kv.prefilled(seq)
    seq.generated = 1
    # Position 4 (the fed token) is in each row's own block; position 5 fits there too: nothing to take.
    assert kv.grow_all([seq]) == 1
    assert drained(kv).block_copies == []
    check_invariants(kv, [seq])


# -- beam forks -----------------------------------------------------------------------------------------------


def test_a_fork_keeps_usage_in_whole_slots():
    kv = PagedKV(16 * 4, block_size=4, watermark=0.0)
    seq = group(0, 6, 8, width=2, beam=True)
    admit_and_prefill(kv, seq)                              # rows share blocks for positions 0..5
    assert kv.grow_all([seq]) == 1                          # row 0 copies the block holding position 6
    drained(kv)
    seq.generated = 2
    kv.fork(seq, [1, 1])                                    # both rows continue row 1
    t0, t1 = kv.block_tables[seq.id]
    assert t0 == t1 and all(kv.pool.ref_counts[b] == 2 for b in t0)
    logical, allocated = kv.usage()
    assert (logical, allocated) == (2 * 2 * 4, 2 * 4)
    assert type(logical) is int and type(allocated) is int
    check_invariants(kv, [seq])


# -- swapping -------------------------------------------------------------------------------------------------


def test_swap_room_counts_private_blocks_the_watermark_and_evictable_prefixes_exactly():
    kv = PagedKV(7 * 4, block_size=4, watermark=0.15, num_cpu_blocks=2)   # 7 blocks, watermark 1 block
    assert kv.watermark_blocks == 1
    cache_prefix(kv, 0, prefix_id=1)                        # block 0 cached
    cache_prefix(kv, 1, prefix_id=2)                        # block 2 cached
    g = group(2, 6, 4, width=2, prefix_id=1, prefix_len=4)
    assert kv.try_admit(g)
    assert kv.cached_tokens(g) == 4
    kv.prefilled(g)
    g.generated = 1
    assert kv.grow_all([g]) == 1                            # row 0 copies block 1 of the shared table
    drained(kv)
    prefix = kv.prefix_blocks[1]
    tables = kv.block_tables[g.id]
    assert all(t[:1] == prefix for t in tables) and tables[0][1] != tables[1][1]
    # Two private blocks, the host pool holds exactly two: the cached prefix block stays on the device.
    assert kv.can_swap_out(g)
    assert kv.swap_out(g) == 2
    assert kv.cached_tokens(g) == 0
    assert kv.swap_kept == {g.id: prefix}
    # Device: prefix 1 (held by g while swapped) and prefix 2 (unused, evictable) cached; 5 blocks free.
    assert kv.pool.num_free == 5
    # Swap-in room: its 2 host blocks, and nothing for its next step (7 tokens: each row writes into its own block
    # 1, which has room for the 8th): 2 <= 5 free + 1 evictable, and 3 with the watermark.
    assert kv.can_swap_in(g) and kv.can_swap_in(g, watermark=False)
    blocker = group(5, 15, 1)                               # 4 blocks (+ the watermark: 5 free): 1 free + 1 evictable
    assert kv.try_admit(blocker) and kv.pool.num_free == 1
    assert kv.can_swap_in(g, watermark=False)
    assert not kv.can_swap_in(g)
    kv.free(blocker)
    # Another request of prefix 2 makes prefix 1 the least recently used; swapping g back in uses it again.
    other = group(3, 6, 2, prefix_id=2, prefix_len=4)
    assert kv.try_admit(other)
    kv.free(other)
    assert list(kv.prefix_blocks) == [1, 2]
    assert kv.swap_in(g) == 2
    assert list(kv.prefix_blocks) == [2, 1]
    check_invariants(kv, [g])
    kv.free(g)
    # 17 tokens: 5 blocks + the watermark, one more than the 5 free: the least recently used prefix goes.
    assert kv.try_admit(group(4, 17, 1))
    assert list(kv.prefix_blocks) == [1]


def test_a_full_host_pool_refuses_a_group_with_one_block_too_many():
    kv = PagedKV(8 * 4, block_size=4, watermark=0.0, num_cpu_blocks=1)
    cache_prefix(kv, 0, prefix_id=1)
    g = group(1, 6, 4, width=2, prefix_id=1, prefix_len=4)
    assert kv.try_admit(g)
    kv.prefilled(g)
    g.generated = 1
    assert kv.grow_all([g]) == 1                            # 2 private blocks now, 1 host block
    assert not kv.can_swap_out(g)
    with pytest.raises(MemoryError):
        kv.swap_out(g)


# -- cache slots --------------------------------------------------------------------------------------------


def test_slots_map_positions_through_a_table_of_scattered_blocks():
    kv = PagedKV(3 * 4, block_size=4, watermark=0.0)        # blocks 0, 1, 2
    a = group(0, 4, 2)                                      # blocks 0 and 1 (its first token starts block 1)
    b = group(1, 3, 4)                                      # block 2
    assert kv.try_admit(a) and kv.try_admit(b)
    kv.free(a)                                              # free list: 0, 1
    b.generated = 1
    assert kv.grow_all([b]) == 1
    assert kv.block_tables[b.id] == [[2, 0]]
    # Positions 2, 3 in block 2 (slots 8..11), 4, 5 in block 0 (slots 0..3).
    assert kv.slots(b, 2, 6) == [10, 11, 0, 1]
    assert kv.slots(b, 0, 1) == [8]
    assert kv.slots(b, 5, 5) == []


def test_slots_of_each_row_after_copy_on_write():
    kv = PagedKV(8 * 4, block_size=4, watermark=0.0)
    seq = group(0, 6, 4, width=2)
    admit_and_prefill(kv, seq)                              # rows share blocks 0 and 1
    assert kv.grow_all([seq]) == 1                          # row 0 copies block 1 into block 2
    assert kv.block_tables[seq.id] == [[0, 2], [0, 1]]
    assert kv.slots(seq, 3, 7) == [3, 8, 9, 10]
    assert kv.slots(seq, 3, 7, row=1) == [3, 4, 5, 6]


def test_a_group_swapped_out_before_its_prefill_has_no_cached_tokens():
    kv = PagedKV(8 * 4, block_size=4, watermark=0.0, num_cpu_blocks=8)
    cache_prefix(kv, 0, prefix_id=1)
    g = group(1, 6, 4, width=2, prefix_id=1, prefix_len=4)
    assert kv.try_admit(g) and kv.cached_tokens(g) == 4
    assert kv.swap_out(g) == 1                              # the rows' one shared private block
    assert not kv.holds(g)
    assert kv.cached_tokens(g) == 0


def test_a_swapped_group_moves_its_kept_prefix_blocks_to_the_host_and_comes_back_with_copies():
    kv = PagedKV(8 * 4, block_size=4, watermark=0.0, num_cpu_blocks=8)
    cache_prefix(kv, 0, prefix_id=1)                        # block 0 cached
    g = group(1, 6, 4, width=2, prefix_id=1, prefix_len=4)
    assert kv.try_admit(g)
    kv.prefilled(g)
    g.generated = 1
    assert kv.grow_all([g]) == 1
    drained(kv)
    prefix = kv.prefix_blocks[1]
    assert kv.swap_out(g) == 2 and kv.swap_kept == {g.id: prefix}
    drained(kv)
    free, evictable = kv.pool.num_free, kv.pool.num_evictable
    assert kv.spill_kept(g) == 1
    assert g.id not in kv.swap_kept and kv.prefix_blocks[1] == prefix       # still cached, now evictable
    assert kv.pool.num_free == free and kv.pool.num_evictable == evictable + 1
    rows = kv.cpu_tables[g.id]
    assert len(rows) == 2 and rows[0][0] == rows[1][0] and rows[0][1:] != rows[1][1:]
    assert kv.cpu_pool.ref_counts[rows[0][0]] == 2                          # one reference per row
    assert kv.moves[-1:] == [("out", prefix[0], rows[0][0])]
    assert kv.spill_kept(g) == 0                                            # nothing kept any more
    assert kv.swap_in(g) == 3
    tables = kv.block_tables[g.id]
    assert tables[0][0] == tables[1][0] != prefix[0]                        # a private copy, shared by the rows
    check_invariants(kv, [g])
    kv.free(g)
    assert kv.cpu_pool.num_free == 8


@pytest.mark.parametrize("host_blocks, spilled", [(1, 0), (2, 1)])
def test_spilling_needs_room_in_the_host_pool_for_the_kept_blocks(host_blocks, spilled):
    """One row keeping 1 prefix block, its other block on the host: a host pool of 1 has no room left for the kept
    block, one of 2 has exactly that room."""
    kv = PagedKV(8 * 4, block_size=4, watermark=0.0, num_cpu_blocks=host_blocks)
    cache_prefix(kv, 0, prefix_id=1)
    g = group(1, 6, 2, prefix_id=1, prefix_len=4)
    assert kv.try_admit(g)
    kv.prefilled(g)
    g.generated = 1
    assert kv.swap_out(g) == 1 and kv.cpu_pool.num_free == host_blocks - 1
    assert kv.spill_kept(g) == spilled and kv.cpu_pool.num_free == host_blocks - 1 - spilled
    assert kv.swap_kept == ({} if spilled else {g.id: kv.prefix_blocks[1]})


def test_a_swapped_row_with_a_full_table_needs_exactly_one_more_block_to_come_back():
    """One row of 12 tokens (3 full blocks) swapped out: its way back takes its 3 blocks and 1 for its next
    token, so 4 free blocks are enough and 3 are not."""
    kv = PagedKV(8 * 4, block_size=4, watermark=0.0, num_cpu_blocks=8)
    s = group(0, 11, 4)
    assert kv.try_admit(s)
    kv.prefilled(s)
    s.generated = 1
    assert len(kv.block_tables[s.id][0]) == 3                # its 12th token (the one it produced) is stored
    assert kv.swap_out(s) == 3
    blocker = group(1, 15, 1)                                # 4 blocks: 4 free
    assert kv.try_admit(blocker) and kv.pool.num_free == 4
    assert kv.can_swap_in(s)
    other = group(2, 3, 1)                                   # 1 block: 3 free
    assert kv.try_admit(other) and kv.pool.num_free == 3
    assert not kv.can_swap_in(s) and not kv.can_swap_in(s, watermark=False)
