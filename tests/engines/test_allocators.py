"""Property tests of the contiguous arena (buddy, first-fit) and the block pool."""
from hypothesis import given, settings, strategies as st
import pytest

from pagedbench.engines.kv.arena import ContiguousArena
from pagedbench.engines.kv.block_pool import BlockPool, blocks_for
from pagedbench.engines.kv.buddy import BuddyAllocator, next_pow2

ops = st.lists(st.tuples(st.booleans(), st.integers(1, 300), st.integers(0, 50)), max_size=80)


def check_arena(arena: ContiguousArena) -> None:
    spans = [(r.start, r.start + r.taken) for r in arena.regions.values()]
    spans += [(start, start + length) for start, length in arena.free_runs()]
    spans.sort()
    # No slot owned twice (nor owned and free at once), and every slot accounted for.
    for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
        assert a1 <= b0
    assert sum(b - a for a, b in spans) == arena.capacity
    assert all(0 <= a and b <= arena.capacity for a, b in spans)


@pytest.mark.parametrize("allocator", ["buddy", "first_fit"])
@settings(max_examples=150, deadline=None)
@given(capacity=st.integers(1, 2000), script=ops)
def test_arena_never_double_owns_and_free_restores(allocator, capacity, script):
    arena = ContiguousArena(capacity, allocator)
    initial = arena.free_runs()
    owner = 0
    for is_alloc, size, pick in script:
        if is_alloc or not arena.regions:
            region = arena.allocate(owner, size)
            if region is not None:
                assert region.requested == size
                assert region.taken == (next_pow2(size) if allocator == "buddy" else size)
                if allocator == "buddy":
                    assert region.start % region.taken == 0  # buddy blocks are aligned to their size
            owner += 1
        else:
            victim = sorted(arena.regions)[pick % len(arena.regions)]
            arena.free(victim)
        check_arena(arena)
    for victim in list(arena.regions):
        arena.free(victim)
    assert arena.free_runs() == initial


def test_first_fit_coalesces_and_fails_on_fragmented_free_space():
    arena = ContiguousArena(30, "first_fit")
    for i in range(3):
        arena.allocate(i, 10)
    arena.free(0)
    arena.free(2)
    assert arena.free_slots() == 20
    assert arena.allocate(9, 15) is None          # 20 slots free, but in two holes of 10
    assert arena.unusable_free(15) == 20
    arena.free(1)
    assert arena.free_runs() == [(0, 30)]
    assert arena.allocate(9, 15) is not None


def test_buddy_roots_cover_a_non_power_of_two_arena():
    buddy = BuddyAllocator(100)        # 64 + 32 + 4
    assert sorted(buddy.holes()) == [4, 32, 64]
    assert buddy.max_region == 64
    assert buddy.allocate(65) is None
    assert buddy.allocate(33) == 0     # rounded to 64


@settings(max_examples=150, deadline=None)
@given(num_blocks=st.integers(1, 64), script=st.lists(st.tuples(st.sampled_from("aslr"), st.integers(0, 63)), max_size=120))
def test_block_pool_ref_counts(num_blocks, script):
    pool = BlockPool(num_blocks, 16)
    owned: list[int] = []   # one entry per reference held
    for op, pick in script:
        if op == "a" and pool.num_free:
            owned.append(pool.allocate())
        elif op == "s" and owned:
            block = owned[pick % len(owned)]
            pool.share(block)
            owned.append(block)
        elif op in "lr" and owned:
            pool.release(owned.pop(pick % len(owned)))
        # Every reference is counted, no free block is referenced, capacity is conserved.
        for b in range(num_blocks):
            assert pool.ref_counts[b] == owned.count(b)
        assert pool.num_free + len(set(owned)) == num_blocks
    for block in owned:
        pool.release(block)
    assert pool.num_free == num_blocks


def test_block_pool_errors():
    pool = BlockPool(1, 8)
    block = pool.allocate()
    with pytest.raises(MemoryError):
        pool.allocate()
    pool.release(block)
    with pytest.raises(ValueError):
        pool.release(block)
    with pytest.raises(ValueError):
        BlockPool(4, 12)
    assert blocks_for(17, 16) == 2 and blocks_for(16, 16) == 1
