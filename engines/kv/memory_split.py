"""How KV capacity splits into the paper's categories (Figure 2), the same way for every engine.

Every slot of the KV budget is in exactly one category at a time:

- token states: slots holding a token of a sequence that is held in memory
  (a generated token occupies its slot from the iteration that produces it);
- reservation: allocated slots that the owning request will still fill
  before it finishes (judged with its true final length, known to the harness);
- internal fragmentation: allocated slots that the owning request will never
  fill (a region reserved past the request's final length; the unfilled
  tail of a paged sequence's last block);
- external fragmentation & others: free slots lying in holes too small for
  the region the next waiting request needs (so they cannot serve it
  because they are not contiguous), plus slots lost to rounding a region up
  (the buddy allocator's power of two) and slots the manager cannot address
  (budget slots left over when the pool is cut into whole blocks);
- free: every other free slot.

A paged engine's free blocks can all serve any request (a sequence's blocks
need not be contiguous), so its free blocks are never external
fragmentation.

Slots are physical: a block that several sequences share (the samples or
beams of one request, a cached prefix) counts once; the paged manager
removes the repeats from its per-sequence sums.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

CATEGORIES = ("token_states", "reservation", "internal_fragmentation", "external_fragmentation", "free")


@dataclass(slots=True, frozen=True)
class MemorySplit:
    """A capacity split in token slots; the five fields sum to the capacity."""

    token_states: int
    reservation: int
    internal_fragmentation: int
    external_fragmentation: int
    free: int

    @property
    def capacity(self) -> int:
        return (self.token_states + self.reservation + self.internal_fragmentation
                + self.external_fragmentation + self.free)

    def as_tuple(self) -> tuple[int, int, int, int, int]:
        return (self.token_states, self.reservation, self.internal_fragmentation,
                self.external_fragmentation, self.free)


@dataclass(slots=True, frozen=True)
class Holding:
    """What one sequence holds: stored tokens, final length, slots asked for and slots taken."""

    stored: int      # L: tokens of this sequence in its slots now
    final: int       # F: prompt + output tokens when the request finishes
    requested: int   # R: slots allocated for the request's use
    taken: int       # P: slots taken from the pool (R rounded up by the allocator)


def split_memory(capacity: int, holdings: Iterable[Holding], free_slots: int,
                 unusable_free: int) -> MemorySplit:
    """Split `capacity` slots given what each sequence holds and the free space.

    `free_slots` is every free slot the manager can hand out; `unusable_free`
    is the part of it that lies in holes too small for the next waiting
    request. Slots neither held nor free (left over by the manager) count as
    external fragmentation & others.
    """
    stored = will_fill = requested = taken = 0
    for h in holdings:
        if h.stored > h.requested or h.requested > h.taken or h.stored > h.final:
            raise ValueError(f"inconsistent holding {h}")
        stored += h.stored
        will_fill += min(h.requested, h.final)
        requested += h.requested
        taken += h.taken
    return split_totals(capacity, stored, will_fill, requested, taken, free_slots, unusable_free)


def split_totals(capacity: int, stored: int, will_fill: int, requested: int, taken: int, free_slots: int,
                 unusable_free: int) -> MemorySplit:
    """`split_memory` from the holdings' sums, which a KV manager can keep up to date as it allocates.

    stored = sum of L, will_fill = sum of min(R, F), requested = sum of R,
    taken = sum of P over every held sequence.
    """
    unmanaged = capacity - taken - free_slots
    if not stored <= will_fill <= requested <= taken:
        raise ValueError(f"inconsistent holdings: stored {stored}, will fill {will_fill}, "
                         f"requested {requested}, taken {taken}")
    if unmanaged < 0 or not 0 <= unusable_free <= free_slots:
        raise ValueError(f"capacity {capacity} < taken {taken} + free {free_slots}, or bad unusable {unusable_free}")
    return MemorySplit(stored, will_fill - stored, requested - will_fill,
                       taken - requested + unmanaged + unusable_free, free_slots - unusable_free)
