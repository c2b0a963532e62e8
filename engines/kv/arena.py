"""ContiguousArena: one arena of KV token slots handing out one contiguous region per request."""
from __future__ import annotations

from dataclasses import dataclass

from pagedbench.engines.kv.buddy import BuddyAllocator
from pagedbench.engines.kv.first_fit import FirstFitAllocator

ALLOCATORS = {"buddy": BuddyAllocator, "first_fit": FirstFitAllocator}


@dataclass(slots=True, frozen=True)
class Region:
    start: int      # first slot
    requested: int  # slots the request asked for
    taken: int      # slots taken from the arena (requested, rounded up by the allocator)


class ContiguousArena:
    """Regions keyed by owner id; `buddy` rounds each region up to a power of two, `first_fit` does not."""

    def __init__(self, capacity: int, allocator: str = "buddy"):
        if allocator not in ALLOCATORS:
            raise ValueError(f"unknown allocator {allocator!r}; valid: {sorted(ALLOCATORS)}")
        self.capacity = capacity
        self.allocator_name = allocator
        self._alloc = ALLOCATORS[allocator](capacity)
        self.regions: dict[int, Region] = {}

    @property
    def max_region(self) -> int:
        """The largest region this arena could ever hand out (when empty)."""
        return self._alloc.max_region

    def taken_size(self, size: int) -> int:
        return self._alloc.rounded(size)

    def allocate(self, owner: int, size: int) -> Region | None:
        if owner in self.regions:
            raise ValueError(f"owner {owner} already holds a region")
        if size < 1:
            raise ValueError(f"region size must be >= 1, got {size}")
        start = self._alloc.allocate(size)
        if start is None:
            return None
        region = Region(start, size, self._alloc.rounded(size))
        self.regions[owner] = region
        return region

    def free(self, owner: int) -> None:
        self._alloc.free(self.regions.pop(owner).start)

    def free_slots(self) -> int:
        return sum(self._alloc.holes())

    def unusable_free(self, need: int) -> int:
        """Free slots in holes too small for a region of `need` slots (0 when nothing waits)."""
        if need <= 0:
            return 0
        taken = self._alloc.rounded(need)
        return sum(h for h in self._alloc.holes() if h < taken)

    def free_runs(self) -> list[tuple[int, int]]:
        """(start, length) of every free block, for tests and inspection."""
        return self._alloc.free_blocks()
