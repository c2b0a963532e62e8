"""The paged manager's prefix cache under memory pressure, and swapping a group that maps a cached prefix.

A cached prefix no group holds is evicted, least recently used first, when admission or growth needs its
blocks, and is computed and cached again by the next request of that prefix; a prefix a running or swapped
group holds is never evicted. A swap moves only the group's private blocks: the cached prefix blocks stay on
the device and the group's rows share them again after swap-in. Every step is checked against a brute-force
reading of the block tables (tests/engines/test_sharing.py: reference counts, free list, usage, split).
"""
from __future__ import annotations

import random

import pytest

from pagedbench.engines.kv.paged import PagedKV
from tests.engines.test_sharing import (Driver, admit_and_prefill, check_grown, check_invariants, drained,
                                        group, sim_setting)  # noqa: F401 (sim_setting: a fixture)
from pagedbench.workloads.request import Request
from pagedbench.engines.config import PagedEngineConfig

BS = 4


def cache_prefix(kv: PagedKV, i: int, prefix_id: int, prefix_len: int = 2 * BS) -> None:
    """Serve one short request of `prefix_id` to the end: its prefix stays cached, held by no group."""
    seq = group(i, prefix_len + 1, 1, prefix_id=prefix_id, prefix_len=prefix_len)
    admit_and_prefill(kv, seq)
    kv.free(seq)
    check_invariants(kv, [])


def test_unused_prefixes_are_evicted_lru_first_when_admission_needs_blocks():
    kv = PagedKV(12 * BS, block_size=BS, watermark=0.0)              # 12 blocks
    for i, prefix_id in enumerate((0, 1, 2)):
        cache_prefix(kv, i, prefix_id)                               # 2 blocks each, LRU order 0, 1, 2
    cache_prefix(kv, 3, 0)                                           # a hit: 0 is now the most recent
    assert list(kv.prefix_blocks) == [1, 2, 0] and kv.pool.num_free == 6
    evicted = list(kv.prefix_blocks[1])

    big = group(10, 7 * BS - 1, 1)                                   # 7 blocks: prefix 1 (the LRU) must go
    assert kv.try_admit(big)
    check_invariants(kv, [big])
    assert list(kv.prefix_blocks) == [2, 0]
    assert all(b in kv.block_tables[big.id][0] or kv.pool.ref_counts[b] == 0 for b in evicted)
    assert kv.pool.num_free == 6 + 2 - 7                             # its 2 blocks went back to the pool

    # A prefix a running group holds is not evicted: prefix 2 held, prefix 0 alone cannot free 3 blocks.
    holder = group(11, 2 * BS + 1, 4, prefix_id=2, prefix_len=2 * BS)
    kv.free(big)
    assert kv.try_admit(holder) and kv.cached_tokens(holder) == 2 * BS
    check_invariants(kv, [holder])
    assert kv.pool.num_free == 7
    too_big = group(12, 10 * BS - 1, 1)                              # 10 blocks > 7 free + 2 of prefix 0
    assert not kv.try_admit(too_big)
    assert list(kv.prefix_blocks) == [0, 2], "a failed admission evicted a prefix"
    check_invariants(kv, [holder])

    # Prefix 1 again: computed anew (nothing cached), then cached again.
    again = group(13, 2 * BS + 3, 2, prefix_id=1, prefix_len=2 * BS)
    assert kv.try_admit(again) and kv.cached_tokens(again) == 0
    kv.prefilled(again)
    assert kv.prefix_blocks[1] == kv.block_tables[again.id][0][:2]
    check_invariants(kv, [holder, again])


def test_growth_evicts_an_unused_prefix_before_it_would_preempt():
    kv = PagedKV(6 * BS, block_size=BS, watermark=0.0)               # 6 blocks
    cache_prefix(kv, 0, 5)                                           # 2 blocks kept by the cache
    seq = group(1, 4 * BS - 1, 3)                                    # 4 blocks after its prefill token
    admit_and_prefill(kv, seq)
    assert kv.pool.num_free == 0
    assert kv.grow_all([seq]) == 1                                   # the next token starts a block
    check_grown(kv, [seq])
    check_invariants(kv, [seq])
    assert not kv.prefix_blocks and kv.pool.num_free == 1


@pytest.mark.parametrize("first", [True, False])
@pytest.mark.parametrize("width", [1, 3])
def test_swap_moves_only_private_blocks_and_shares_the_cached_prefix_again(first, width):
    """`first`: the swapped group computed the prefix and handed it to the cache; otherwise it mapped it."""
    kv = PagedKV(40 * BS, block_size=BS, watermark=0.0, num_cpu_blocks=40)
    prefix_len = 3 * BS + 1                                          # 3 full blocks cached
    if not first:
        cache_prefix(kv, 0, 9, prefix_len)
    seq = group(1, prefix_len + 6, 8, width=width, prefix_id=9, prefix_len=prefix_len)
    admit_and_prefill(kv, seq)
    prefix = list(kv.prefix_blocks[9])
    for _ in range(3):
        assert kv.grow_all([seq]) == 1
        seq.generated += 1
    drained(kv)
    check_invariants(kv, [seq])
    tables = [list(t) for t in kv.block_tables[seq.id]]
    assert all(t[:3] == prefix for t in tables)
    private = {b for t in tables for b in t} - set(prefix)
    free_before = kv.pool.num_free

    assert kv.swap_out(seq) == len(private)
    check_invariants(kv, [], [seq])
    out = drained(kv).swap_out
    assert {src for src, _ in out} == private and len(out) == len(private)
    assert kv.pool.num_free == free_before + len(private)            # the prefix stays on the device
    assert kv.prefix_blocks[9] == prefix
    assert all(kv.pool.ref_counts[b] == 2 for b in prefix)           # the cache's and the swapped group's

    # While swapped the prefix cannot be evicted: a request needing every other block is refused.
    greedy = group(2, (kv.pool.num_free + 1) * BS - 1, 1)
    assert not kv.try_admit(greedy)
    assert kv.prefix_blocks[9] == prefix

    assert kv.can_swap_in(seq)
    assert kv.swap_in(seq) == len(private)
    check_invariants(kv, [seq])
    back = drained(kv).swap_in
    assert len(back) == len(private) and not {dst for _, dst in back} & set(prefix)
    assert all(t[:3] == prefix for t in kv.block_tables[seq.id])    # the same physical prefix blocks
    assert all(kv.pool.ref_counts[b] == width + 1 for b in prefix)
    assert kv.cpu_pool.num_free == kv.cpu_pool.num_blocks
    assert kv.grow_all([seq]) == 1
    check_grown(kv, [seq])
    kv.free(seq)
    check_invariants(kv, [])


def run_many_prefixes(seed: int) -> int:
    """The random driver with 12 prefixes, more than its pool keeps; how many calls evicted a prefix."""
    d = Driver(seed)
    d.prefixes = {p: d.rng.randint(d.bs, 4 * d.bs) for p in range(12)}
    d.cache_bound = max(n // d.bs for n in d.prefixes.values())      # a group fits beside its own prefix
    seen, evictions = set(), 0
    check = d.check

    def counting(op):
        nonlocal seen, evictions
        check(op)
        evictions += bool(seen - set(d.kv.prefix_blocks))
        seen = set(d.kv.prefix_blocks)

    d.check = counting
    d.run(num_requests=40)
    assert not d.kv.block_tables and not d.kv.cpu_tables and not d.kv.swap_kept
    assert all(s.generated == s.output_len for s in d.done)
    return evictions


@pytest.mark.parametrize("seed", range(30))
def test_random_operations_with_more_prefixes_than_fit_evict_and_keep_every_invariant(seed):
    assert run_many_prefixes(seed) > 0


def test_sim_run_with_more_prefixes_than_the_pool_holds_finishes(sim_setting):
    """Item of the paper's Figure 16 with many prefixes: before eviction the scheduler stalled with the pool
    full of unused cached prefixes."""
    from tests.engines.test_sharing import all_finished, sim_run

    rng = random.Random(1)
    prefixes = {p: tuple(rng.randrange(1000) for _ in range(3 * 16 + 5)) for p in range(30)}   # 3 blocks each
    requests, t = [], 0.0
    for i in range(120):
        t += rng.expovariate(8.0)
        p = rng.randrange(30)
        prompt = prefixes[p] + tuple(rng.randrange(1000) for _ in range(rng.randint(4, 40)))
        requests.append(Request(i, t, prompt, rng.randint(4, 40), prefix_id=p, prefix_len=len(prefixes[p])))
    record, summary = sim_run(sim_setting, PagedEngineConfig(), requests, 60 * 16)   # 60 blocks < 90
    all_finished(record, summary)


def test_idle_cached_prefixes_count_on_neither_side_of_the_saving():
    kv = PagedKV(12 * BS, block_size=BS, watermark=0.0)
    for i, prefix_id in enumerate((0, 1, 2)):
        cache_prefix(kv, i, prefix_id)                               # 3 idle prefixes, 2 blocks each
    assert kv.pool.num_free == 6 and kv.usage() == (0, 0)           # not a saving of -infinity
    seq = group(5, 2 * BS + 3, 4, prefix_id=1, prefix_len=2 * BS)   # maps prefix 1: those 2 blocks shared
    admit_and_prefill(kv, seq)
    assert kv.usage() == (3 * BS, 3 * BS)                            # its 3 blocks; prefixes 0 and 2 idle
