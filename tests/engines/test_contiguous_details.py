"""Exact edge behaviour of the contiguous KV manager on small hand-built layouts.

Regions are laid out by first fit from slot 0, so each test knows where every
region starts; the tests check the room a region has left, the slots a row
reads, whether a group of rows could ever fit, which dead beam's region a
beam step reuses (the one sharing the most with the parent) and the copies
it queues, and the hooks the contiguous engines answer with a constant.
"""
from __future__ import annotations

import pytest

from pagedbench.engines.kv.contiguous import ContiguousKV
from pagedbench.engines.kv.reservation import Reservation
from tests.engines.test_contiguous_fork import beam_group, drained, prefilled_group, region_starts
from tests.engines.conftest import make_request
from pagedbench.engines.sequence import Sequence


def single(i: int, prompt_len: int, output_len: int) -> Sequence:
    return Sequence(make_request(i, prompt_len, output_len))


def capped_manager() -> ContiguousKV:
    """Regions of max_seq_len = 8 slots, first fit from slot 0."""
    return ContiguousKV(64, Reservation.MAX, max_seq_len=8, allocator="first_fit")


def test_grow_says_whether_the_region_has_a_slot_for_the_next_token():
    kv = capped_manager()
    seq = single(0, 5, 10)
    assert kv.try_admit(seq)
    seq.generated = 2                       # 7 of 8 slots hold tokens: the next goes into slot 8
    assert kv.grow(seq)
    seq.generated = 3                       # 8 of 8: no slot left
    assert not kv.grow(seq)


def test_grow_all_returns_the_first_full_region_from_start_on():
    kv = capped_manager()
    full, room = single(0, 5, 10), single(1, 2, 3)
    assert kv.try_admit(full) and kv.try_admit(room)
    full.generated, room.generated = 3, 1   # 8 of 8 slots; 3 of 8
    assert kv.grow_all([full, room]) == 0
    assert kv.grow_all([room, full]) == 1
    assert kv.grow_all([full, room], 1) == 2
    assert kv.grow_all([room]) == 1
    assert kv.grow_all([]) == 0


def test_slots_of_a_region_and_its_end():
    kv = capped_manager()
    a, b = single(0, 5, 10), single(1, 2, 3)
    assert kv.try_admit(a) and kv.try_admit(b)   # a: slots 0..7, b: slots 8..15
    assert kv.slots(b, 2, 5) == [10, 11, 12]
    assert kv.slots(b, 0, 8) == list(range(8, 16))   # the whole region
    with pytest.raises(IndexError, match="overflow the 8-slot region"):
        kv.slots(b, 0, 9)
    assert kv.slots(a, 0, 2) == [0, 1]


def test_holds_and_the_constant_answers():
    kv = capped_manager()
    seq = single(0, 3, 2)
    assert not kv.holds(seq)
    assert kv.try_admit(seq)
    assert kv.holds(seq)
    assert kv.cached_tokens(seq) == 0        # nothing is cached across requests: the whole prompt is prefilled
    assert not kv.can_swap_out(seq)
    assert not kv.can_swap_in(seq)
    assert not kv.can_swap_in(seq, watermark=False)
    assert kv.spill_kept(seq) == 0          # never swapped: no kept block to move
    kv.free(seq)
    assert not kv.holds(seq)


def test_a_group_whose_regions_cannot_all_fit_an_empty_arena_is_rejected():
    kv = ContiguousKV(100, Reservation.ORACLE, max_seq_len=64, allocator="first_fit")
    assert kv.rejection(beam_group(0, 50, 10, width=1)) is None
    assert kv.rejection(beam_group(1, 50, 10, width=2)) == (
        "needs 2 regions of 60 slots; an empty arena of 100 cannot hold them")
    assert kv.rejection(beam_group(2, 40, 10, width=2)) is None


def test_a_beam_step_reuses_the_dead_region_sharing_the_most_with_the_parent():
    kv = ContiguousKV(512, Reservation.ORACLE, max_seq_len=64, allocator="first_fit")
    seq = beam_group(0, 10, 8, width=4)
    assert kv.try_admit(seq)
    r0, r1, r2, r3 = region_starts(kv, seq)
    seq.generated = 1
    kv.share_prompt(seq)
    drained(kv)
    seq.generated = 2                                   # 11 cached positions
    kv.fork(seq, [0, 0, 1, 1])                          # old rows 2, 3 die: they hold the prompt only
    assert drained(kv) == [(r0 + 10, r2 + 10, 1), (r1 + 10, r3 + 10, 1)]
    assert region_starts(kv, seq) == [r0, r2, r1, r3]
    # Rows 0, 1 share 11 positions, rows 2, 3 share 11, the two pairs share the 10 prompt positions.
    seq.generated = 3                                   # 12 cached positions
    kv.fork(seq, [2, 2, 1, 1])                          # old rows 0 and 3 die
    # Row 1 (second child of old row 2) takes old row 3's region (11 shared with row 2, not old row 0's 10);
    # row 3 (second child of old row 1) takes old row 0's region, which shares 11 with row 1.
    assert drained(kv) == [(r1 + 11, r3 + 11, 1), (r2 + 11, r0 + 11, 1)]
    assert region_starts(kv, seq) == [r1, r3, r2, r0]


def test_re_forming_rows_whose_regions_already_agree_copies_nothing():
    kv = ContiguousKV(512, Reservation.ORACLE, max_seq_len=64, allocator="first_fit")
    seq = beam_group(0, 10, 8, width=2)
    prefilled_group(kv, seq)
    r0, r1 = region_starts(kv, seq)
    seq.generated = 2
    kv.fork(seq, [0, 0])
    assert drained(kv) == [(r0 + 10, r1 + 10, 1)]
    kv.fork(seq, [1, 1])            # both rows now hold the same 11 positions: nothing to write
    assert drained(kv) == []
    assert region_starts(kv, seq) == [r1, r0]
