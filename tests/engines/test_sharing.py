"""Block sharing in the paged KV manager: reference counts, copy-on-write, forks, the prefix cache, swapping.

A seeded random driver runs PagedKV the way the iteration scheduler does
(admission, prefill, decode steps with preemption, beam forks, swaps,
finishing) and checks, after every call into the manager, that its
reference counts, free list, usage and memory split agree with a
brute-force reading of its block tables. Focused tests pin down the
sharing of a group's prompt, beam forks, the prefix cache, swapping a
shared group and the contiguous engines' row copies; a scheduler-level
test runs small parallel-sampling and beam-search traces on the sim.
"""
from __future__ import annotations

from collections import Counter, deque
import random

import pytest

from pagedbench.engines.batch import Batch
from pagedbench.engines.kv.block_pool import blocks_for
from pagedbench.engines.kv.contiguous import ContiguousKV
from pagedbench.engines.kv.paged import PagedKV
from pagedbench.engines.kv.reservation import Reservation
from pagedbench.engines.sequence import Sequence
from pagedbench.workloads.request import Request
from pagedbench.engines.config import ContiguousEngineConfig, PagedEngineConfig


def group(i, prompt_len, output_len, width=1, beam=False, prefix_id=None, prefix_len=0):
    kind = dict(beam_width=width) if beam else dict(n=width)
    return Sequence(Request(i, 0.0, tuple(range(prompt_len)), output_len, prefix_id=prefix_id,
                            prefix_len=prefix_len, **kind))


def drained(kv) -> Batch:
    batch = Batch()
    kv.drain_into(batch)
    return batch


# -- invariants ---------------------------------------------------------------------------------------


def fill(bs: int, index: int, length: int) -> int:
    """Positions of a row of `length` tokens that the block at table index `index` holds."""
    return min(bs, max(0, length - index * bs))


def expected_token_states(kv: PagedKV, held) -> int:
    """Slots holding a token, counted over distinct physical blocks: a block shared by several rows (or kept
    by the prefix cache) holds its positions once."""
    bs = kv.block_size
    fills: dict[int, int] = {}
    for seq in held:
        for row, table in enumerate(kv.block_tables[seq.id]):
            for index, block in enumerate(table):
                f = fill(bs, index, seq.length)
                assert fills.setdefault(block, f) == f, \
                    f"block {block} holds {fills[block]} positions for one row, {f} for row {row} of {seq.id}"
    for prefix, blocks in kv.prefix_blocks.items():
        for block in blocks:
            assert fills.setdefault(block, bs) == bs, f"cached block {block} of prefix {prefix} is not full"
    return sum(fills.values())


def check_pool(pool, tables_by_owner: list[list[int]], what: str) -> set[int]:
    """(1) reference counts equal table occurrences, (2) no referenced block is free, (3) no leak."""
    counts = Counter(block for table in tables_by_owner for block in table)
    free = list(pool._free)
    assert len(free) == len(set(free)), f"{what}: a block is twice in the free list"
    free_set = set(free)
    for block in range(pool.num_blocks):
        refs = pool.ref_counts[block]
        assert refs == counts.get(block, 0), \
            f"{what}: block {block} has ref count {refs}, the tables reference it {counts.get(block, 0)} times"
        if counts.get(block):
            assert block not in free_set, f"{what}: block {block} is referenced and free"
        else:
            assert block in free_set, f"{what}: block {block} is neither referenced nor free (leaked)"
    assert len(free_set) + len(counts) == pool.num_blocks
    return set(counts)


def check_invariants(kv: PagedKV, held: list[Sequence], swapped=()) -> None:
    bs = kv.block_size
    assert set(kv.block_tables) == {s.id for s in held}
    assert set(kv.cpu_tables) == {s.id for s in swapped}
    for seq in held:
        tables = kv.block_tables[seq.id]
        assert len(tables) == seq.width
        for table in tables:
            assert len(table) * bs >= seq.length, f"request {seq.id}: a row's table misses positions"
    # A swapped group keeps one reference to the cached prefix blocks it left on the device.
    assert set(kv.swap_kept) <= {s.id for s in swapped}
    for seq in swapped:
        kept = kv.swap_kept.get(seq.id, [])
        assert kept == kv.prefix_blocks.get(seq.prefix_id, [])[:len(kept)], f"request {seq.id} keeps {kept}"
    device = [t for tables in kv.block_tables.values() for t in tables] + list(kv.prefix_blocks.values())
    device += list(kv.swap_kept.values())
    allocated = check_pool(kv.pool, device, "device")
    if kv.cpu_pool is not None:
        check_pool(kv.cpu_pool, [t for tables in kv.cpu_tables.values() for t in tables], "host")
    else:
        assert not kv.cpu_tables
    # (5) usage: slots the tables would take unshared, slots allocated to groups (a row's or a swapped group's
    # block; a cached block no group holds is not counted).
    logical = sum(len(t) * bs for tables in kv.block_tables.values() for t in tables)
    held_blocks = {b for tables in kv.block_tables.values() for t in tables for b in t}
    held_blocks |= {b for kept in kv.swap_kept.values() for b in kept}
    assert held_blocks <= allocated
    idle = {b for blocks in kv.prefix_blocks.values() for b in blocks} - held_blocks
    assert kv.usage() == (logical, len(allocated - idle) * bs)
    # (4) the split sums to the capacity and counts each physical slot holding a token once.
    stored = sum(s.width * s.length for s in held)
    split = kv.split(held, None, stored)
    assert sum(split.as_tuple()) == kv.capacity
    assert split.token_states == expected_token_states(kv, held), (split, [(s.id, s.width, s.length) for s in held])


def check_grown(kv: PagedKV, seqs: list[Sequence]) -> None:
    """(6) after grow_all: every row owns the block it writes at L - 1 and has a slot for position L."""
    bs, refs = kv.block_size, kv.pool.ref_counts
    for seq in seqs:
        last = (seq.length - 1) // bs
        for row, table in enumerate(kv.block_tables[seq.id]):
            assert refs[table[last]] == 1, f"request {seq.id} row {row}: block {table[last]} still shared"
            assert len(table) * bs > seq.length, f"request {seq.id} row {row}: no slot for position {seq.length}"


def check_batch(kv: PagedKV, batch: Batch, decode: list[Sequence]) -> None:
    """(7) copy-on-write destinations: distinct fresh blocks, each the block one decoding row writes at L - 1."""
    bs, refs = kv.block_size, kv.pool.ref_counts
    dests = [d for _, d in batch.block_copies]
    assert len(set(dests)) == len(dests), f"copy destinations repeat: {batch.block_copies}"
    assert batch.copy_tokens == len(batch.block_copies) * bs
    # The ordered list of moves holds the same pairs.
    kinds = {"copy": batch.block_copies, "out": batch.swap_out, "in": batch.swap_in}
    for kind, pairs in kinds.items():
        assert [(a, b) for k, a, b in batch.moves if k == kind] == pairs, (kind, batch.moves)
    writers = Counter(table[(s.length - 1) // bs] for s in decode for table in kv.block_tables[s.id])
    for src, dst in batch.block_copies:
        assert refs[dst] == 1, f"copy {src} -> {dst}: the destination has ref count {refs[dst]}"
        assert writers[dst] == 1, f"copy {src} -> {dst}: the destination is not the block a decoding row writes"


# -- the random driver ----------------------------------------------------------------------------------


class Driver:
    """A small copy of the iteration scheduler's use of the KV manager, with a check after every call."""

    def __init__(self, seed: int, check_batches: bool = True):
        self.check_batches = check_batches
        rng = self.rng = random.Random(seed)
        self.bs = bs = rng.choice([2, 4, 8])
        num_blocks = rng.randint(30, 90)
        self.kv = PagedKV(num_blocks * bs, bs, watermark=rng.choice([0.0, 0.0, 0.05]),
                          num_cpu_blocks=rng.choice([0, 12, 40, 400]))
        self.prefixes = {p: rng.randint(1, 3 * bs + 1) for p in range(3)}
        self.cache_bound = sum(n // bs for n in self.prefixes.values())
        self.waiting: deque[Sequence] = deque()
        self.running: dict[int, Sequence] = {}
        self.swapped: deque[Sequence] = deque()
        self.done: list[Sequence] = []
        self.aborted: list[Sequence] = []
        self.created = 0
        self.calls = Counter()
        self.log: deque[str] = deque(maxlen=40)

    def note(self, op: str, seq: Sequence, *args) -> None:
        self.log.append(f"{op}(request {seq.id}: width {seq.width}{' beam' if seq.beam else ''}, "
                        f"L={seq.length}{', ' if args else ''}{', '.join(map(str, args))})")

    # bookkeeping
    def check(self, op: str) -> None:
        self.calls[op] += 1
        try:
            check_invariants(self.kv, list(self.running.values()), list(self.swapped))
        except AssertionError as e:
            raise AssertionError(f"after {op}: {e}\nlast operations:\n  " + "\n  ".join(list(self.log)[-12:])) from e

    def new_request(self) -> Sequence | None:
        rng, bs, kv = self.rng, self.bs, self.kv
        width = rng.randint(1, 6)
        beam = width > 1 and rng.random() < 0.5
        prefix_id, prefix_len = None, 0
        if rng.random() < 0.4:
            prefix_id = rng.choice(list(self.prefixes))
            prefix_len = self.prefixes[prefix_id]
            prompt = prefix_len + rng.randint(1, 2 * bs)
        else:
            prompt = rng.randint(1, 4 * bs)
        output = rng.randint(1, 4 * bs)
        # Any group must fit the pool alone, whatever the prefix cache keeps: nothing ever gets stuck.
        if width * blocks_for(prompt + output, bs) + self.cache_bound + kv.watermark_blocks > kv.pool.num_blocks:
            return None
        seq = group(self.created, prompt, output, width, beam, prefix_id, prefix_len)
        assert kv.rejection(seq) is None
        self.created += 1
        return seq

    def preempt(self, seq: Sequence) -> None:
        kv = self.kv
        del self.running[seq.id]
        swap = kv.can_swap_out(seq) and (seq.width > 1 or self.rng.random() < 0.5)
        self.note("swap_out" if swap else "free", seq)
        if swap:
            self.swapped.appendleft(seq)
            kv.swap_out(seq)
            self.check("swap_out")
        else:
            kv.free(seq)
            if seq.width == 1:
                self.waiting.appendleft(seq)     # recomputed: back to the front of the queue
            else:
                self.aborted.append(seq)         # the scheduler stops here: a group is never recomputed
            self.check("free (preempt)")

    def iteration(self, admit_p: float) -> None:
        kv, rng = self.kv, self.rng
        swapped_in = 0
        while self.swapped and kv.can_swap_in(self.swapped[0], watermark=False):
            seq = self.swapped.popleft()
            self.running[seq.id] = seq
            self.note("swap_in", seq)
            kv.swap_in(seq)
            swapped_in += 1
            self.check("swap_in")
        prefill: list[Sequence] = []
        if not self.swapped and not swapped_in and self.waiting and rng.random() < admit_p:
            while self.waiting:
                seq = self.waiting[0]
                admitted = kv.try_admit(seq)
                self.note("try_admit", seq, f"-> {admitted}")
                if admitted:
                    self.waiting.popleft()
                    self.running[seq.id] = seq
                    prefill.append(seq)
                self.check("try_admit")
                if not admitted:
                    break
        decode: list[Sequence] = []
        if not prefill and self.running:
            seqs = list(self.running.values())
            i = kv.grow_all(seqs)
            self.log.append(f"grow_all(requests {[s.id for s in seqs]}) -> {i}")
            self.check("grow_all")
            while i < len(seqs):
                self.preempt(seqs.pop())
                assert seqs, "every running group was preempted"
                start, i = i, kv.grow_all(seqs, i)
                self.log.append(f"grow_all(requests {[s.id for s in seqs]}, start={start}) -> {i}")
                self.check("grow_all")
            check_grown(kv, seqs)
            decode = seqs
        batch = drained(kv)
        try:
            if self.check_batches:
                check_batch(kv, batch, decode)
        except AssertionError as e:
            recent = "\n  ".join(list(self.log)[-12:])
            raise AssertionError(f"{e}\nmoves {batch.moves}\nrecent operations:\n  {recent}") from e
        # The iteration runs: each prefill produces one token per row, each decode step one more.
        for seq in prefill:
            kv.prefilled(seq)
            self.check("prefilled")
            seq.generated += 1
            self.check("prefill token")
            kv.share_prompt(seq)
            self.note("prefill", seq)
            self.check("share_prompt (prefill)")
        for seq in decode:
            seq.generated += 1
            self.check("decode token")
            if seq.beam:
                parents = sorted(rng.randrange(seq.width) for _ in range(seq.width))
                self.note("fork", seq, parents)
                kv.fork(seq, parents)
                self.check("fork (beam)")
        for seq in prefill + decode:
            if seq.generated == seq.output_len:
                del self.running[seq.id]
                self.note("free (finished)", seq)
                kv.free(seq)
                self.done.append(seq)
                self.check("free")

    def run(self, num_requests: int) -> None:
        rng = self.rng
        steps = 0
        while self.created < num_requests or self.waiting or self.running or self.swapped:
            if self.created < num_requests and rng.random() < 0.5:
                for _ in range(rng.randint(1, 3)):
                    seq = self.new_request()
                    if seq is not None:
                        self.waiting.append(seq)
            draining = self.created >= num_requests
            self.iteration(admit_p=1.0 if draining or not self.running else 0.6)
            steps += 1
            assert steps < 5000, "the driver made no progress"


@pytest.mark.parametrize("seed", range(40))
def test_random_operations_keep_every_sharing_invariant(seed):
    d = Driver(seed)
    d.run(num_requests=30)
    kv = d.kv
    assert not kv.block_tables and not kv.cpu_tables
    assert all(s.generated == s.output_len for s in d.done)
    # Only the prefix cache's blocks stay allocated, each with the cache's one reference.
    cached = [b for blocks in kv.prefix_blocks.values() for b in blocks]
    assert len(set(cached)) == len(cached)
    assert kv.pool.num_free == kv.pool.num_blocks - len(cached)
    assert all(kv.pool.ref_counts[b] == 1 for b in cached)
    assert kv.split([], None, 0).token_states == len(cached) * kv.block_size
    if kv.cpu_pool is not None:
        assert kv.cpu_pool.num_free == kv.cpu_pool.num_blocks
        assert not any(kv.cpu_pool.ref_counts)


def test_random_driver_reaches_every_operation():
    """The seeds above exercise copy-on-write, beam forks, both preemptions, swaps and the prefix cache.
    (Invariants 1-6 are checked here too; the batches' copy list, invariant 7, is left to the test above.)"""
    calls, copies = Counter(), 0
    for seed in range(40):
        d = Driver(seed, check_batches=False)
        original = d.kv.drain_into

        def counting(batch, original=original):
            nonlocal copies
            original(batch)
            copies += len(batch.block_copies)

        d.kv.drain_into = counting
        d.run(num_requests=30)
        calls += d.calls
        calls["cached prefix"] += bool(d.kv.prefix_blocks)
    for op in ("swap_out", "swap_in", "free (preempt)", "fork (beam)", "prefilled", "cached prefix"):
        assert calls[op] > 0, op
    assert copies > 0


# -- focused cases ----------------------------------------------------------------------------------------


def admit_and_prefill(kv: PagedKV, seq: Sequence) -> None:
    assert kv.try_admit(seq)
    kv.prefilled(seq)
    seq.generated += 1
    kv.share_prompt(seq)


@pytest.mark.parametrize("prompt_len, copies", [(10, 3), (9, 3), (8, 0), (4, 0)])
def test_parallel_group_shares_its_prompt_and_copies_on_first_write(prompt_len, copies):
    kv = PagedKV(64 * 4, block_size=4, watermark=0.0)
    seq = group(0, prompt_len, 5, width=4)
    admit_and_prefill(kv, seq)
    tables = kv.block_tables[seq.id]
    prompt_blocks = tables[0][:blocks_for(prompt_len, 4)]
    assert all(t[:len(prompt_blocks)] == prompt_blocks for t in tables)
    # A prompt ending on a block boundary: each row's first token starts a block of its own.
    assert len({t[-1] for t in tables}) == (4 if prompt_len % 4 == 0 else 1)
    assert all(kv.pool.ref_counts[b] == 4 for b in prompt_blocks)
    check_invariants(kv, [seq])
    drained(kv)
    assert kv.grow_all([seq]) == 1
    check_grown(kv, [seq])
    check_invariants(kv, [seq])
    batch = drained(kv)
    check_batch(kv, batch, [seq])
    assert len(batch.block_copies) == copies, (
        f"prompt of {prompt_len} tokens in blocks of 4, width 4: {len(batch.block_copies)} copies "
        f"{batch.block_copies}, expected {copies}")
    assert batch.copy_tokens == copies * 4


def test_beam_fork_onto_one_parent_frees_the_other_rows_blocks():
    kv = PagedKV(64 * 4, block_size=4, watermark=0.0)
    seq = group(0, 6, 8, width=4, beam=True)
    admit_and_prefill(kv, seq)
    assert kv.grow_all([seq]) == 1               # rows 0-2 copy the block holding position 6
    drained(kv)
    seq.generated += 1
    check_invariants(kv, [seq])
    before = [list(t) for t in kv.block_tables[seq.id]]
    kept = set(before[0])
    gone = {b for t in before[1:] for b in t} - kept
    assert gone, before
    free_before = kv.pool.num_free
    kv.fork(seq, [0, 0, 0, 0])
    check_invariants(kv, [seq])
    assert all(t == before[0] for t in kv.block_tables[seq.id])
    assert all(kv.pool.ref_counts[b] == 4 for b in kept)
    for b in gone:
        assert kv.pool.ref_counts[b] == 0 and b in kv.pool._free
    assert kv.pool.num_free == free_before + len(gone)


@pytest.mark.parametrize("prefix_len", [3, 8, 9, 14])
def test_prefix_cache_keeps_the_prefix_for_later_requests(prefix_len):
    bs = 4
    kv = PagedKV(64 * bs, block_size=bs, watermark=0.0)
    first = group(0, prefix_len + 3, 2, width=2, prefix_id=7, prefix_len=prefix_len)
    assert kv.try_admit(first) and kv.cached_tokens(first) == 0
    check_invariants(kv, [first])
    kv.prefilled(first)
    check_invariants(kv, [first])
    full = prefix_len // bs
    prefix = kv.block_tables[first.id][0][:full]
    assert kv.prefix_blocks.get(7, []) == prefix
    first.generated += 1
    kv.fork(first, [0, 0])
    while first.generated < first.output_len:
        assert kv.grow_all([first]) == 1
        first.generated += 1
        check_invariants(kv, [first])
    kv.free(first)
    check_invariants(kv, [])
    assert kv.pool.num_blocks - kv.pool.num_free == full          # the cache keeps its blocks
    assert all(kv.pool.ref_counts[b] == 1 for b in prefix)

    second = group(1, prefix_len + 5, 3, prefix_id=7, prefix_len=prefix_len)
    assert kv.try_admit(second)
    check_invariants(kv, [second])
    assert kv.cached_tokens(second) == full * bs
    assert kv.block_tables[second.id][0][:full] == prefix
    kv.prefilled(second)
    second.generated += 1
    check_invariants(kv, [second])
    kv.free(second)
    check_invariants(kv, [])
    assert kv.pool.num_blocks - kv.pool.num_free == full


def test_preempting_a_group_midway_through_copy_on_write_leaves_no_copy_into_a_freed_block():
    """grow_all copies row 0's shared last block, runs out of blocks at row 1; the scheduler then swaps the
    group out. Invariant 7: every copy the iteration hands the executor fills a fresh block a decoding row
    writes (ref 1), not a block its group gave up in the same iteration (a copy charged for nothing, and one
    more distinct block to swap out)."""
    kv = PagedKV(4 * 4, block_size=4, watermark=0.0, num_cpu_blocks=16)    # 4 blocks
    single = group(0, 2, 10)                   # 1 block
    wide = group(1, 6, 10, width=4)            # 2 blocks shared by its 4 rows
    admit_and_prefill(kv, single)
    admit_and_prefill(kv, wide)
    drained(kv)
    assert kv.pool.num_free == 1
    seqs = [single, wide]
    assert kv.grow_all(seqs) == 1              # row 0 of `wide` took the last block for its copy
    check_invariants(kv, seqs)
    kv.swap_out(seqs.pop())                    # the scheduler preempts the latest admitted group
    check_invariants(kv, [single], [wide])
    assert kv.grow_all(seqs, 1) == 1
    check_grown(kv, seqs)
    batch = drained(kv)
    moved_out = {src for src, _ in batch.swap_out}
    for src, dst in batch.block_copies:
        assert kv.pool.ref_counts[dst] == 1 and dst not in moved_out, (
            f"copy {src} -> {dst} queued for request {wide.id}, which was swapped out by the same iteration: "
            f"the destination has ref count {kv.pool.ref_counts[dst]} and is swapped out too ({batch.moves})")
    check_batch(kv, batch, seqs)


def sharing_pattern(tables):
    """Which (row, index) pairs name the same block: the structure sharing gives a group's tables."""
    cells = [(r, i, b) for r, t in enumerate(tables) for i, b in enumerate(t)]
    return {(r1, i1, r2, i2) for r1, i1, b1 in cells for r2, i2, b2 in cells if b1 == b2}


@pytest.mark.parametrize("beam", [False, True])
def test_swap_moves_shared_blocks_once_and_restores_the_sharing(beam):
    kv = PagedKV(64 * 4, block_size=4, watermark=0.0, num_cpu_blocks=64)
    other = group(1, 5, 20)
    seq = group(0, 10, 20, width=4, beam=beam)
    admit_and_prefill(kv, other)
    admit_and_prefill(kv, seq)
    rng = random.Random(3)
    for _ in range(5):
        assert kv.grow_all([other, seq]) == 2
        other.generated += 1
        seq.generated += 1
        if beam:
            kv.fork(seq, sorted(rng.randrange(4) for _ in range(4)))
    drained(kv)
    check_invariants(kv, [other, seq])
    tables = [list(t) for t in kv.block_tables[seq.id]]
    distinct = {b for t in tables for b in t}
    assert len(distinct) < sum(len(t) for t in tables)      # the rows do share blocks
    pattern = sharing_pattern(tables)
    free_before = kv.pool.num_free

    assert kv.can_swap_out(seq)
    assert kv.swap_out(seq) == len(distinct)
    check_invariants(kv, [other], [seq])
    batch = drained(kv)
    assert len(batch.swap_out) == len(distinct)
    assert {src for src, _ in batch.swap_out} == distinct
    assert len({dst for _, dst in batch.swap_out}) == len(distinct)
    assert kv.pool.num_free == free_before + len(distinct)
    assert sharing_pattern(kv.cpu_tables[seq.id]) == pattern

    assert kv.can_swap_in(seq, watermark=False)
    assert kv.swap_in(seq) == len(distinct)
    check_invariants(kv, [other, seq])
    batch = drained(kv)
    assert len(batch.swap_in) == len(distinct)
    assert sharing_pattern(kv.block_tables[seq.id]) == pattern
    assert kv.cpu_pool.num_free == kv.cpu_pool.num_blocks
    assert kv.grow_all([other, seq]) == 2
    check_grown(kv, [other, seq])
    check_invariants(kv, [other, seq])


def test_contiguous_group_takes_a_region_per_row_and_copies_on_fork():
    kv = ContiguousKV(512, Reservation.ORACLE, max_seq_len=64, allocator="first_fit")
    seq = group(0, 10, 6, width=3, beam=True)
    assert kv.rejection(seq) is None
    assert kv.try_admit(seq)
    assert len(kv.arena.regions) == 3
    assert all(r.requested == 16 for r in kv.arena.regions.values())
    assert kv.usage() == (48, 48)
    kv.prefilled(seq)
    seq.generated = 1
    kv.fork(seq, [0, 0, 0])
    batch = drained(kv)
    start = kv.arena.regions[seq.id].start
    assert len(batch.region_copies) == 2
    assert all(src == start and n == seq.length - 1 for src, _, n in batch.region_copies)
    assert batch.copy_tokens == 2 * (seq.length - 1)
    seq.generated = 3
    kv.fork(seq, [1, 1, 0])                     # rows 0 and 2 keep their parents' regions; row 1 takes dead row 2's
    batch = drained(kv)
    start = {index: kv.arena.regions[kv._key(seq, index)].start for index in range(3)}
    assert batch.region_copies == [(start[1] + 10, start[2] + 10, 2)]   # only what followed the shared prompt
    kv.fork(seq, [0, 1, 2])                     # every row keeps its own history: nothing to copy
    assert drained(kv).region_copies == []
    kv.free(seq)
    assert not kv.arena.regions and kv.usage() == (0, 0)


def test_contiguous_rejects_a_group_whose_regions_cannot_fit_an_empty_arena():
    kv = ContiguousKV(100, Reservation.ORACLE, max_seq_len=64, allocator="first_fit")
    assert kv.rejection(group(0, 20, 20, width=2)) is None          # 2 x 40 of 100
    reason = kv.rejection(group(1, 20, 20, width=3))                 # 3 x 40 > 100
    assert reason is not None and "3 regions" in reason
    assert not kv.try_admit(group(1, 20, 20, width=3))
    assert not kv.arena.regions                                      # a failed admission gives its regions back


# -- the scheduler on the sim ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim_setting():
    from pagedbench.engines.specs.presets import load_hardware, load_model
    return load_model("opt-13b"), load_hardware("a100-40gb")


def sim_run(setting, engine, requests, capacity_slots):
    from pagedbench.engines.build import build_scheduler
    from pagedbench.engines.config import SchedulerLimits
    from pagedbench.engines.loop import run_engine
    from pagedbench.engines.sim.beam_model import BeamModel
    from pagedbench.engines.sim.build import build_cost_model
    from pagedbench.engines.sim.executor import SimExecutor
    from pagedbench.engines.sim.transfer import TransferModel
    from pagedbench.results.record.frames import iterations_frame, requests_frame
    from pagedbench.results.record.summary import summarize

    model, hardware = setting
    width = max(r.width for r in requests)
    engine.check_width(width)
    scheduler = build_scheduler(engine, SchedulerLimits(max_seq_len=model.max_seq_len), capacity_slots,
                                model.kv_bytes_per_token // model.tp)
    block_size = engine.block_size if engine.name == "paged" else None
    executor = SimExecutor(build_cost_model(model, hardware, block_size),
                           TransferModel(model, hardware, block_size), BeamModel(1.0, 0))
    record = run_engine(requests, scheduler, executor, progress=False)
    return record, summarize(iterations_frame(record), requests_frame(record))


def trace(seed, num, width=1, beam=False, rate=4.0):
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(num):
        t += rng.expovariate(rate)
        kind = dict(beam_width=width) if beam else dict(n=width)
        out.append(Request(i, t, tuple(range(rng.randint(16, 160))), rng.randint(16, 160), **kind))
    return out


def all_finished(record, summary):
    assert summary["num_finished"] == summary["num_requests"] == len(record.sequences)
    assert all(s.generated == s.output_len for s in record.sequences)


def test_sim_groups_on_a_tight_budget_swap_share_and_finish(sim_setting):

    capacity = 120 * 16
    savings = {}
    for beam in (False, True):
        requests = trace(5, 16, width=4, beam=beam, rate=20.0)
        record, summary = sim_run(sim_setting, PagedEngineConfig(swap_space=64), requests, capacity)
        all_finished(record, summary)
        assert summary["num_swap_outs"] > 0, "the budget was meant to force swapping"
        assert summary["memory_saving"] > 0
        assert summary["num_copied_tokens"] > 0
        savings[beam] = summary["memory_saving"]
        record, summary = sim_run(sim_setting, ContiguousEngineConfig(name="orca", reservation="oracle", allocator="first_fit"),
                                  requests, capacity)
        all_finished(record, summary)
        assert summary["memory_saving"] == 0
    assert savings[True] > savings[False], savings


def test_sim_batches_copy_into_held_blocks_and_never_swap_a_group_straight_back_out(sim_setting):
    """Every batch the scheduler hands the executor: copy-on-write destinations are fresh blocks the decoding
    rows write (ref 1), and no block is swapped in and swapped straight back out by the same iteration (a
    group brought back only to be preempted again pays two transfers and a preemption for nothing)."""
    from pagedbench.engines.sim import executor as sim_executor

    problems = []

    class Checking(sim_executor.SimExecutor):
        kv = None

        def execute(self, batch):
            refs, bs = self.kv.pool.ref_counts, self.kv.block_size
            writes = Counter(t[(s.length - 1) // bs] for s in batch.decode for t in self.kv.block_tables[s.id])
            for src, dst in batch.block_copies:
                if refs[dst] != 1 or writes[dst] != 1:
                    problems.append(f"copy {src} -> {dst}: ref count {refs[dst]}, written by {writes[dst]} rows")
            both = {s for s, _ in batch.swap_out} & {d for _, d in batch.swap_in}
            if both:
                problems.append(f"blocks {sorted(both)} swapped in and out by one iteration "
                                f"({batch.swapped_in} groups in, {batch.swapped_out} out)")
            return super().execute(batch)

    from pagedbench.engines.build import build_scheduler
    from pagedbench.engines.config import SchedulerLimits
    from pagedbench.engines.loop import run_engine
    from pagedbench.engines.sim.beam_model import BeamModel
    from pagedbench.engines.sim.build import build_cost_model
    from pagedbench.engines.sim.transfer import TransferModel

    model, hardware = sim_setting
    engine = PagedEngineConfig(swap_space=64)
    for seed in (5, 6):
        scheduler = build_scheduler(engine, SchedulerLimits(max_seq_len=model.max_seq_len), 120 * 16,
                                    model.kv_bytes_per_token // model.tp)
        executor = Checking(build_cost_model(model, hardware, 16), TransferModel(model, hardware, 16),
                            BeamModel(1.0, 0))
        executor.kv = scheduler.kv
        record = run_engine(trace(seed, 16, width=4, beam=True, rate=20.0), scheduler, executor, progress=False)
        assert all(s.generated == s.output_len for s in record.sequences)
    kinds = Counter("copy" if p.startswith("copy") else "swap in and out" for p in problems)
    assert not problems, (f"{len(problems)} inconsistent batches ({dict(kinds)}), e.g.: "
                          + "; ".join(dict.fromkeys(problems[:3] + [p for p in problems if p.startswith("copy")][:2])))


def test_sim_swap_preemption_of_single_sequences(sim_setting):

    record, summary = sim_run(sim_setting, PagedEngineConfig(preemption="swap", swap_space=64),
                              trace(9, 40, rate=20.0), 100 * 16)
    all_finished(record, summary)
    assert summary["num_swap_outs"] > 0
    assert any(s.swaps for s in record.sequences)


def test_recompute_preemption_refuses_groups():

    with pytest.raises(ValueError):
        PagedEngineConfig(preemption="recompute").check_width(4)
    PagedEngineConfig(preemption="recompute").check_width(1)
    PagedEngineConfig().check_width(4)


def test_swapped_groups_come_back_before_any_new_request_is_admitted():
    from pagedbench.engines.config import SchedulerLimits
    from pagedbench.engines.scheduling.iteration import IterationScheduler

    kv = PagedKV(16 * 4, block_size=4, watermark=0.0, num_cpu_blocks=64)
    # auto: the late single requests are recomputed, the groups of two swapped.
    sched = IterationScheduler(kv, SchedulerLimits(max_seq_len=64, max_num_batched_tokens=64), "auto")
    a, b = group(0, 6, 20, width=2), group(1, 6, 20, width=2)
    for seq in (a, b):
        sched.add(seq, 0.0)
    batch = sched.schedule(0.0)
    assert batch.prefill == [a, b]
    swapped_at = None
    for step in range(40):                        # decode until memory runs out and b is swapped out
        for seq in batch.advancing():
            seq.generated += 1
        sched.after_iteration(batch)
        sched.release_finished([s for s in batch.advancing() if s.done])
        late = group(2 + step, 3, 5)
        sched.add(late, 0.0)                      # a new request arrives every step
        batch = sched.schedule(0.0)
        if swapped_at is None and sched.swapped:
            swapped_at = step
        if sched.swapped:
            assert not batch.prefill, "a new request was admitted while a group waited in the host pool"
        if swapped_at is not None and not sched.swapped:
            assert b.status.value == "running" and batch.swapped_in == 1 and b in batch.decode
            return
    raise AssertionError(f"no swap-out and swap-in within 40 steps (swapped at {swapped_at})")
