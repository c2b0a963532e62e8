"""First-fit allocator over an arena of token slots: exact-size regions, holes coalesced on free."""
from __future__ import annotations

from bisect import bisect_left


class FirstFitAllocator:
    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.max_region = capacity
        self._holes: list[list[int]] = [[0, capacity]]  # sorted [start, length] of maximal free runs
        self._used: dict[int, int] = {}                 # offset -> length

    def rounded(self, size: int) -> int:
        return size

    def allocate(self, size: int) -> int | None:
        for i, hole in enumerate(self._holes):
            if hole[1] >= size:
                offset = hole[0]
                if hole[1] == size:
                    del self._holes[i]
                else:
                    hole[0] += size
                    hole[1] -= size
                self._used[offset] = size
                return offset
        return None

    def free(self, offset: int) -> None:
        size = self._used.pop(offset)
        i = bisect_left(self._holes, [offset, 0])
        after = self._holes[i] if i < len(self._holes) else None
        before = self._holes[i - 1] if i > 0 else None
        if before is not None and before[0] + before[1] == offset:
            before[1] += size
            if after is not None and offset + size == after[0]:
                before[1] += after[1]
                del self._holes[i]
        elif after is not None and offset + size == after[0]:
            after[0] = offset
            after[1] += size
        else:
            self._holes.insert(i, [offset, size])

    def holes(self) -> list[int]:
        return [length for _, length in self._holes]

    def free_blocks(self) -> list[tuple[int, int]]:
        return [(start, length) for start, length in self._holes]
