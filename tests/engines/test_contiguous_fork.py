"""Beam forks in the contiguous KV manager: which regions a step writes, and how much of each.

A beam step should write one region per child beyond a parent's first (a
surviving parent keeps its region), each a dead beam's region, and copy into
it only the positions after the dead beam's lineage split from the parent's.
Focused tests pin the copies of hand-built lineages; a seeded brute-force
driver runs random beam steps on groups sharing one arena, keeps every row's
history as a list of token tags, applies the queued copies to a simulated
arena and checks that every row's `slots` read back its own history.
"""
from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from pagedbench.engines.kv.contiguous import ContiguousKV
from pagedbench.engines.kv.reservation import Reservation
from pagedbench.engines.sequence import Sequence
from pagedbench.workloads.request import Request


def beam_group(i: int, prompt_len: int, output_len: int, width: int) -> Sequence:
    return Sequence(Request(i, 0.0, tuple(range(prompt_len)), output_len, beam_width=width))


def drained(kv: ContiguousKV) -> list[tuple[int, int, int]]:
    """The (source start, destination start, tokens) copies queued since the last call."""
    batch = SimpleNamespace(region_copies=[], copy_tokens=0)
    kv.drain_into(batch)
    assert batch.copy_tokens == sum(n for _, _, n in batch.region_copies)
    return batch.region_copies


def region_starts(kv: ContiguousKV, seq: Sequence) -> list[int]:
    """The first slot of the region each row of `seq` reads and writes."""
    return [kv.slots(seq, 0, 1, row)[0] for row in range(seq.width)]


def prefilled_group(kv: ContiguousKV, seq: Sequence) -> list[tuple[int, int, int]]:
    """Admit `seq`, prefill its prompt and share it with every row; the copies that queued."""
    assert kv.try_admit(seq)
    seq.generated = 1
    kv.share_prompt(seq)
    return drained(kv)


def test_only_the_diverged_suffix_is_copied():
    kv = ContiguousKV(512, Reservation.ORACLE, max_seq_len=64, allocator="first_fit")
    seq = beam_group(0, 10, 6, width=3)
    assert kv.try_admit(seq)
    r0, r1, r2 = region_starts(kv, seq)
    seq.generated = 1
    kv.share_prompt(seq)                                   # the prompt, whole, into rows 1 and 2
    assert drained(kv) == [(r0, r1, 10), (r0, r2, 10)]
    assert region_starts(kv, seq) == [r0, r1, r2]
    seq.generated = 2                                      # 11 cached positions
    kv.fork(seq, [0, 0, 1])                                # old row 2 dies; new row 1 takes its region
    assert drained(kv) == [(r0 + 10, r2 + 10, 1)]          # rows 0 and 2 shared the prompt only
    assert region_starts(kv, seq) == [r0, r2, r1]
    seq.generated = 3                                      # 12 cached positions
    kv.fork(seq, [0, 1, 1])                                # old row 2 (region r1) dies; new row 2 copies row 1
    assert drained(kv) == [(r2 + 10, r1 + 10, 2)]          # old rows 1 and 2 split after the prompt
    assert region_starts(kv, seq) == [r0, r2, r1]
    seq.generated = 4                                      # 13 cached positions
    kv.fork(seq, [1, 1, 2])                                # old row 0 dies; it shared 11 with old row 1
    assert drained(kv) == [(r2 + 11, r0 + 11, 2)]
    assert region_starts(kv, seq) == [r2, r0, r1]


@pytest.mark.parametrize("parents", [[0, 0, 1], [0, 0, 0], [1, 1, 2], [0, 2, 2], [0, 0, 1, 1], [0, 1, 1, 1, 4]])
def test_a_surviving_parent_keeps_its_region(parents):
    width = len(parents)
    kv = ContiguousKV(1024, Reservation.ORACLE, max_seq_len=64, allocator="first_fit")
    seq = beam_group(0, 10, 8, width)
    prefilled_group(kv, seq)
    before = region_starts(kv, seq)
    seq.generated = 2
    kv.fork(seq, parents)
    copies = drained(kv)
    assert len(copies) == width - len(set(parents))
    survivors = {before[p] for p in set(parents)}
    dead = set(before) - survivors
    for source, destination, tokens in copies:
        region = max(s for s in before if s <= destination)
        assert region in dead, f"copy into the region of a surviving parent: {(source, destination, tokens)}"
    after = region_starts(kv, seq)
    for parent in set(parents):
        assert after[parents.index(parent)] == before[parent], "a parent's first child moved out of its region"


@pytest.mark.parametrize("width", [2, 3, 4, 5, 6])
def test_a_step_copies_one_region_per_child_beyond_its_parents_first(width):
    rng = random.Random(width)
    kv = ContiguousKV(4096, Reservation.ORACLE, max_seq_len=256, allocator="first_fit")
    seq = beam_group(0, 20, 100, width)
    assert len(prefilled_group(kv, seq)) == width - 1
    for step in range(2, 100):
        seq.generated = step
        parents = sorted(rng.choices(range(width), k=width))
        kv.fork(seq, parents)
        assert len(drained(kv)) == width - len(set(parents)), f"step {step}, parents {parents}"


def apply(arena: list, copies: list[tuple[int, int, int]]) -> None:
    """Run one iteration's copies as the real backend does: every source read before any destination written.
    Each copy must start where its destination first differs from its source (nothing already there is copied)."""
    reads = [arena[s:s + n] for s, _, n in copies]
    for (s, d, n), data in zip(copies, reads):
        assert n > 0 and arena[d] != arena[s], f"copy {(s, d, n)} starts on a position its destination holds"
        arena[d:d + n] = data


@pytest.mark.parametrize("seed", range(40))
def test_every_row_reads_back_its_own_history_through_random_forks(seed):
    rng = random.Random(seed)
    capacity = 6000
    kv = ContiguousKV(capacity, Reservation.ORACLE, max_seq_len=256, allocator="first_fit")
    arena: list = [None] * capacity
    groups = [beam_group(i, rng.randint(1, 40), rng.randint(2, 60), width=rng.randint(2, 6)) for i in range(4)]
    histories: dict[int, list[list]] = {}
    for seq in groups:                                   # prefill into row 0, then share the prompt
        assert kv.try_admit(seq)
        prompt = [("prompt", seq.id, k) for k in range(seq.prompt_len)]
        for slot, tag in zip(kv.slots(seq, 0, seq.prompt_len, 0), prompt):
            arena[slot] = tag
        seq.generated = 1
        kv.share_prompt(seq)
        histories[seq.id] = [list(prompt) for _ in range(seq.width)]
    apply(arena, drained(kv))
    step = 0
    while groups:
        step += 1
        expected_copies = 0
        for seq in groups:                               # each row writes the token it feeds, then beams re-form
            n = seq.length
            rows = histories[seq.id]
            for row in range(seq.width):
                tag = ("token", seq.id, step, row)
                arena[kv.slots(seq, n - 1, n, row)[0]] = tag
                rows[row].append(tag)
            seq.generated += 1
            parents = rng.choices(range(seq.width), k=seq.width)
            if rng.random() < 0.7:
                parents.sort()
            histories[seq.id] = [list(rows[p]) for p in parents]
            kv.fork(seq, parents)
            expected_copies += seq.width - len(set(parents))
        copies = drained(kv)
        assert len(copies) == expected_copies
        apply(arena, copies)
        for seq in groups:
            cached = seq.length - 1
            starts = region_starts(kv, seq)
            assert len(set(starts)) == seq.width, "two rows share a region"
            for row, history in enumerate(histories[seq.id]):
                assert len(history) == cached
                assert [arena[s] for s in kv.slots(seq, 0, cached, row)] == history, \
                    f"request {seq.id} row {row} reads another history at step {step}"
        for seq in [s for s in groups if s.done]:
            kv.free(seq)
            groups.remove(seq)
    assert not kv.arena.regions


def test_free_drops_the_row_mapping():
    kv = ContiguousKV(512, Reservation.ORACLE, max_seq_len=64, allocator="first_fit")
    seq = beam_group(7, 10, 6, width=3)
    prefilled_group(kv, seq)
    seq.generated = 2
    kv.fork(seq, [0, 0, 1])
    assert region_starts(kv, seq) != sorted(region_starts(kv, seq))   # the rows moved off their own regions
    kv.free(seq)
    assert not kv._region_of and not kv._shared
    again = beam_group(7, 10, 6, width=3)                # the same id, admitted afresh: rows in their own regions
    assert kv.try_admit(again)
    regions = kv.arena.regions
    assert region_starts(kv, again) == [regions[7].start, regions[(7, 1)].start, regions[(7, 2)].start]
    kv.free(again)
    assert not kv.arena.regions and not kv._region_of
