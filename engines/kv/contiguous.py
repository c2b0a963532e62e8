"""KV memory for the contiguous engines: one region per request, sized by a reservation policy at admission."""
from __future__ import annotations

from engines.kv.arena import ContiguousArena
from engines.kv.memory_split import MemorySplit, split_totals
from engines.kv.reservation import Reservation
from engines.sequence import Sequence


class ContiguousKV:
    def __init__(self, capacity: int, reservation: Reservation, max_seq_len: int, allocator: str = "buddy"):
        self.capacity = capacity
        self.reservation = reservation
        self.max_seq_len = max_seq_len
        self.arena = ContiguousArena(capacity, allocator)
        # Sums over held regions of min(requested, final length), requested and taken slots.
        self._will_fill = self._requested = self._taken = 0

    recomputes = False   # a region never grows, so nothing is ever preempted

    def describe(self) -> str:
        return (f"contiguous arena of {self.capacity:,} slots, {self.arena.allocator_name} allocator, "
                f"reservation={self.reservation.value}")

    def region_size(self, seq: Sequence) -> int:
        return self.reservation.slots(seq.prompt_len, seq.output_len, self.max_seq_len)

    def rejection(self, seq: Sequence) -> str | None:
        """Why `seq` could never be admitted, or None."""
        need = self.arena.taken_size(self.region_size(seq))
        if need > self.arena.max_region:
            return (f"needs a contiguous region of {need} slots; the largest the arena "
                    f"of {self.capacity} slots can hold is {self.arena.max_region}")
        return None

    def try_admit(self, seq: Sequence) -> bool:
        region = self.arena.allocate(seq.id, self.region_size(seq))
        if region is None:
            return False
        self._will_fill += min(region.requested, seq.final_len)
        self._requested += region.requested
        self._taken += region.taken
        return True

    def grow(self, seq: Sequence) -> bool:
        """Make room for the token the next iteration produces; the region was sized at admission."""
        return self.grow_all([seq]) == 1

    def grow_all(self, seqs: list[Sequence], start: int = 0) -> int:
        """`grow` each of seqs[start:]; the index of the first whose region is full, or len(seqs)."""
        regions = self.arena.regions
        for i in range(start, len(seqs)):
            seq = seqs[i]
            if seq.prompt_len + seq.generated >= regions[seq.id].requested:
                return i
        return len(seqs)

    def free(self, seq: Sequence) -> None:
        region = self.arena.regions[seq.id]
        self._will_fill -= min(region.requested, seq.final_len)
        self._requested -= region.requested
        self._taken -= region.taken
        self.arena.free(seq.id)

    def slots(self, seq: Sequence, start: int, end: int) -> list[int]:
        """Arena slots of positions start..end-1 of `seq`: its region is contiguous."""
        region = self.arena.regions[seq.id]
        if end > region.requested:
            raise IndexError(f"positions up to {end} overflow the {region.requested}-slot region of request {seq.id}")
        return list(range(region.start + start, region.start + end))

    def holds(self, seq: Sequence) -> bool:
        return seq.id in self.arena.regions

    def split(self, held, next_waiting: Sequence | None, stored: int | None = None) -> MemorySplit:
        """The split with `held` the sequences holding regions; `stored`, if the caller keeps it, their tokens."""
        if len(held) != len(self.arena.regions):
            raise ValueError(f"split of {len(held)} sequences; the arena holds {len(self.arena.regions)} regions")
        if stored is None:
            stored = sum(s.prompt_len + s.generated for s in held)
        need = self.region_size(next_waiting) if next_waiting is not None else 0
        return split_totals(self.capacity, stored, self._will_fill, self._requested, self._taken,
                            self.arena.free_slots(), self.arena.unusable_free(need))
