"""The memory split, category by category, against a brute-force count of the block tables and regions.

`split_totals` computes the last category (external fragmentation & others)
as what is left of the capacity, so a split always sums to the capacity and
a test of the sum cannot fail. Here every category is counted on its own,
from its definition in engines/kv/memory_split.py, by walking the KV
manager's block tables (paged) or regions (contiguous) slot by slot:

- token states: physical slots holding a token of a held row, a slot that
  several rows (or the prefix cache) map counted once;
- reservation: allocated slots some row maps below its final length that
  hold no token yet;
- internal fragmentation: allocated slots no row will ever fill;
- external fragmentation & others: free slots in holes too small for the
  next waiting request's region, slots a region's rounding takes, and slots
  the pool cannot address (the budget's remainder after whole blocks);
- free: every other free slot.

Each is checked after every iteration of random traces of single sequences,
parallel-sampling groups and beam searches (with shared prefixes), served by
every engine through `run_engine`; the recorded iteration rows must carry the
same numbers. The paged manager is also driven by test_sharing's random
`Driver` (swaps, prefix eviction, copy-on-write), with the same count after
every call into it.
"""
from __future__ import annotations

import random

import pytest

from pagedbench.engines.build import build_scheduler
from pagedbench.engines.config import EngineConfig, SchedulerLimits
from pagedbench.engines.registry import engine_config
from pagedbench.engines.kv.contiguous import ContiguousKV
from pagedbench.engines.kv.memory_split import CATEGORIES
from pagedbench.engines.kv.paged import PagedKV
from pagedbench.engines.loop import run_engine
from pagedbench.engines.sequence import Sequence
from pagedbench.engines.sim.beam_model import BeamModel
from tests.engines.conftest import UnitExecutor
from tests.engines.test_sharing import Driver
from pagedbench.workloads.request import Request

MAX_SEQ_LEN = 64


# -- the brute-force counts -----------------------------------------------------------------------------


def paged_split(kv: PagedKV, held) -> dict[str, int]:
    """The five categories of a paged manager, counted slot by slot over its block tables."""
    bs = kv.block_size
    num_blocks = kv.capacity // bs                 # whole blocks of the budget: the rest is unaddressable
    tokens: set[tuple[int, int]] = set()           # (block, offset) holding a token
    will_fill: set[tuple[int, int]] = set()        # (block, offset) some row fills before it finishes
    allocated: set[int] = set()
    held = list(held)
    assert set(kv.block_tables) == {s.id for s in held}
    for seq in held:
        tables = kv.block_tables[seq.id]
        assert len(tables) == seq.width, f"request {seq.id}: {len(tables)} tables for {seq.width} rows"
        for table in tables:
            allocated.update(table)
            assert len(table) * bs >= seq.length, f"request {seq.id}: a row's table misses positions"
            for position in range(len(table) * bs):
                slot = (table[position // bs], position % bs)
                if position < seq.length:
                    tokens.add(slot)
                if position < seq.final_len:
                    will_fill.add(slot)
    for blocks in kv.prefix_blocks.values():      # the cache keeps full blocks of prompt tokens
        allocated.update(blocks)
        for block in blocks:
            for offset in range(bs):
                tokens.add((block, offset))
                will_fill.add((block, offset))
    cached = {b for blocks in kv.prefix_blocks.values() for b in blocks}
    for request_id, kept in kv.swap_kept.items():
        assert set(kept) <= cached, f"swapped request {request_id} keeps blocks {kept} the cache does not hold"
    assert tokens <= will_fill
    assert max(allocated, default=0) < num_blocks
    return {"token_states": len(tokens),
            "reservation": len(will_fill - tokens),
            "internal_fragmentation": len(allocated) * bs - len(will_fill),
            "external_fragmentation": kv.capacity - num_blocks * bs,
            "free": (num_blocks - len(allocated)) * bs}


def next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def region_size(engine: EngineConfig, seq: Sequence) -> int:
    """Slots a contiguous engine reserves for one row of `seq`, by its reservation rule."""
    if engine.name == "static" or engine.reservation == "max":
        return MAX_SEQ_LEN
    if engine.reservation == "pow2":
        return min(seq.prompt_len + next_pow2(seq.output_len), MAX_SEQ_LEN)
    return seq.prompt_len + seq.output_len


def taken_size(engine: EngineConfig, size: int) -> int:
    return next_pow2(size) if engine.allocator == "buddy" else size


def buddy_roots(capacity: int) -> list[tuple[int, int]]:
    """(start, size) of the power-of-two pieces a buddy arena is cut into, largest first."""
    roots, start = [], 0
    for bit in reversed(range(capacity.bit_length())):
        if capacity >> bit & 1:
            roots.append((start, 1 << bit))
            start += 1 << bit
    return roots


def usable_free(engine: EngineConfig, capacity: int, free: list[bool], need: int) -> int:
    """Free slots that lie where a region of `need` slots could be placed now."""
    usable = [False] * capacity
    if engine.allocator == "buddy":
        # A region is a power of two, aligned to its size, inside one root.
        for root_start, root_size in buddy_roots(capacity):
            if need > root_size:
                continue
            for start in range(root_start, root_start + root_size, need):
                if all(free[start:start + need]):
                    usable[start:start + need] = [True] * need
    else:
        start = 0
        while start < capacity:                    # maximal runs of free slots
            if not free[start]:
                start += 1
                continue
            end = start
            while end < capacity and free[end]:
                end += 1
            if end - start >= need:
                usable[start:end] = [True] * (end - start)
            start = end
    return sum(usable)


def contiguous_split(kv: ContiguousKV, engine: EngineConfig, held, next_waiting) -> dict[str, int]:
    """The five categories of a contiguous manager, counted over its regions and the arena's slots."""
    capacity = kv.capacity
    owner_of = [None] * capacity
    held = list(held)
    by_group: dict[int, list] = {s.id: [] for s in held}
    for owner, region in kv.arena.regions.items():
        group_id = owner if isinstance(owner, int) else owner[0]
        assert group_id in by_group, f"region of {owner} belongs to no held request"
        by_group[group_id].append(region)
        for slot in range(region.start, region.start + region.taken):
            assert owner_of[slot] is None, f"slot {slot} is in the regions of {owner_of[slot]} and {owner}"
            owner_of[slot] = owner
    counts = dict.fromkeys(CATEGORIES, 0)
    rounding = 0
    for seq in held:
        regions = by_group[seq.id]
        assert len(regions) == seq.width, f"request {seq.id}: {len(regions)} regions for {seq.width} rows"
        size = region_size(engine, seq)
        for region in regions:
            assert region.requested == size and region.taken == taken_size(engine, size), (seq.id, region)
            # Every row's region holds its own history: prompt and tokens generated so far.
            counts["token_states"] += seq.length
            counts["reservation"] += min(size, seq.final_len) - seq.length
            counts["internal_fragmentation"] += size - min(size, seq.final_len)
            rounding += region.taken - size
    free = [owner is None for owner in owner_of]
    num_free = sum(free)
    unusable = 0
    if next_waiting is not None:
        need = taken_size(engine, region_size(engine, next_waiting))
        unusable = num_free - usable_free(engine, capacity, free, need)
    counts["external_fragmentation"] = rounding + unusable
    counts["free"] = num_free - unusable
    return counts


def brute_force(scheduler, engine: EngineConfig) -> dict[str, int]:
    kv = scheduler.kv
    if isinstance(kv, PagedKV):
        return paged_split(kv, scheduler.held())
    return contiguous_split(kv, engine, scheduler.held(), scheduler.waiting[0] if scheduler.waiting else None)


def check_split(split, expected: dict[str, int], capacity: int, where: str) -> None:
    got = dict(zip(CATEGORIES, split.as_tuple()))
    assert all(v >= 0 for v in expected.values()), f"{where}: the brute force counted a negative category {expected}"
    assert sum(expected.values()) == capacity, f"{where}: the brute force covers {sum(expected.values())} slots"
    wrong = {c: (got[c], expected[c]) for c in CATEGORIES if got[c] != expected[c]}
    assert not wrong, f"{where}: categories (manager, brute force) that differ: {wrong}; split {got}"


# -- random traces through the engine loop --------------------------------------------------------------


class BeamExecutor(UnitExecutor):
    """The unit-cost executor, choosing each beam step's parents as the sim does (seeded)."""

    name = "unit"

    def __init__(self, seed: int):
        super().__init__()
        self.beams = BeamModel(1.0, seed, 0.5)

    def execute(self, batch):
        for seq in batch.prefill:
            if seq.beam:
                seq.parents = [0] * seq.width
        for seq in batch.decode:
            if seq.beam:
                seq.parents = self.beams.parents(seq.id, seq.width)
        return super().execute(batch)


def group_trace(n: int, seed: int, rate: float | None = 2.0) -> list[Request]:
    """Single sequences, parallel samples and beam searches of up to 4 rows, some with a shared prefix."""
    rng = random.Random(seed)
    prefixes = {0: 5, 1: 9, 2: 16}
    t, out = 0.0, []
    for i in range(n):
        if rate:
            t += rng.expovariate(rate)
        width = rng.choice([1, 1, 2, 3, 4])
        kind = {}
        if width > 1:
            kind = dict(beam_width=width) if rng.random() < 0.5 else dict(n=width)
        if rng.random() < 0.3:
            prefix_id = rng.choice(list(prefixes))
            kind.update(prefix_id=prefix_id, prefix_len=prefixes[prefix_id])
            prompt = prefixes[prefix_id] + rng.randint(1, 12)
        else:
            prompt = rng.randint(1, 28)
        out.append(Request(i, t, tuple(range(prompt)), rng.randint(1, 30), **kind))
    return out


ENGINES = [dict(name="static"), dict(name="static", allocator="first_fit"),
           dict(name="orca", reservation="max"), dict(name="orca", reservation="pow2"),
           dict(name="orca", reservation="pow2", allocator="first_fit"),
           dict(name="orca", reservation="oracle", allocator="first_fit"),
           dict(name="orca", reservation="oracle"),
           dict(name="paged", block_size=4, watermark=0.0, swap_space=1e-5),
           dict(name="paged", block_size=2, watermark=0.05, preemption="swap", swap_space=1e-5),
           dict(name="paged", block_size=8, watermark=0.0, swap_space=1e-5)]


def engine_id(engine: dict) -> str:
    return "-".join(str(v) for k, v in engine.items() if k != "swap_space")


def serve_checked(engine: dict, requests: list[Request], capacity: int, seed: int):
    config = engine_config(engine)
    scheduler = build_scheduler(config, SchedulerLimits(max_seq_len=MAX_SEQ_LEN), capacity, bytes_per_slot=1)
    fast, expected = scheduler.memory_split, []

    def checked_split():
        split = fast()
        want = brute_force(scheduler, config)
        check_split(split, want, capacity, f"{engine_id(engine)}, iteration {len(expected)}")
        expected.append(want)
        return split

    scheduler.memory_split = checked_split
    record = run_engine(requests, scheduler, BeamExecutor(seed), progress=False)
    assert len(record.iterations) == len(expected)
    for i, (row, want) in enumerate(zip(record.iterations, expected)):
        assert {c: getattr(row, c) for c in CATEGORIES} == want, f"iteration {i} recorded another split"
    return record


@pytest.mark.parametrize("engine", ENGINES, ids=engine_id)
@pytest.mark.parametrize("seed", range(5))
def test_every_category_matches_a_slot_by_slot_count_on_random_group_traces(engine, seed):
    rng = random.Random(seed)
    capacity = rng.randint(300, 700)
    record = serve_checked(engine, group_trace(30, seed, rate=rng.choice([None, 1.0, 4.0])), capacity, seed)
    served = [s for s in record.sequences if s.rejected_reason is None]
    assert all(s.generated == s.output_len for s in served)
    # The traces did exercise groups, and memory was not idle.
    assert any(s.width > 1 and s.beam for s in served) and any(s.width > 1 and not s.beam for s in served)
    assert max(r.token_states for r in record.iterations) > 0


@pytest.mark.parametrize("engine", ENGINES, ids=engine_id)
def test_every_category_matches_a_slot_by_slot_count_when_memory_is_tight(engine):
    """A budget barely above the widest group: admission waits, holes form, the paged engine preempts."""
    record = serve_checked(engine, group_trace(40, 11, rate=None), 4 * MAX_SEQ_LEN + 24, 11)
    assert any(r.num_waiting for r in record.iterations)
    if engine["name"] == "paged":
        assert sum(r.preempted for r in record.iterations) > 0
    else:
        assert any(r.external_fragmentation for r in record.iterations)


def test_a_group_prefilled_into_a_shared_last_block_counts_its_tokens_once():
    """Four samples of a 10-token prompt in blocks of 4: after the prefill the rows share 3 blocks, and the
    token each row produced sits at position 10 of the shared last block until the next step copies it."""
    engine = dict(name="paged", block_size=4, watermark=0.0, swap_space=1e-5)
    request = Request(0, 0.0, tuple(range(10)), 3, n=4)
    record = serve_checked(engine, [request], 64, 0)
    first = record.iterations[0]
    # 11 positions of one table (10 prompt + 1 produced), the 12th slot will be filled: 3 blocks allocated.
    assert (first.token_states, first.reservation, first.internal_fragmentation) == (11, 1, 0)
    assert (first.external_fragmentation, first.free) == (0, 64 - 12)


def test_a_beam_group_in_orca_counts_every_rows_region():
    engine = dict(name="orca", reservation="oracle", allocator="first_fit")
    request = Request(0, 0.0, tuple(range(10)), 6, beam_width=3)
    record = serve_checked(engine, [request], 100, 0)
    first = record.iterations[0]
    # Three regions of 16: each holds 11 tokens and will hold 5 more.
    assert (first.token_states, first.reservation, first.internal_fragmentation) == (33, 15, 0)
    assert (first.external_fragmentation, first.free) == (0, 100 - 48)


# -- the paged manager under random operations ------------------------------------------------------------


class SplitCheckingDriver(Driver):
    """test_sharing's random driver, checking the split category by category after every call."""

    def check(self, op: str) -> None:
        super().check(op)
        held = list(self.running.values())
        split = self.kv.split(held, None, sum(s.width * s.length for s in held))
        try:
            check_split(split, paged_split(self.kv, held), self.kv.capacity, f"after {op}")
        except AssertionError as e:
            raise AssertionError(f"{e}\nlast operations:\n  " + "\n  ".join(list(self.log)[-12:])) from e


@pytest.mark.parametrize("seed", range(20))
def test_random_paged_operations_keep_every_category_equal_to_a_slot_count(seed):
    driver = SplitCheckingDriver(seed)
    driver.run(num_requests=30)
    assert driver.calls["fork (beam)"] + driver.calls["share_prompt (prefill)"] > 0
