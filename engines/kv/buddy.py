"""Buddy allocator over an arena of token slots: every region is a power of two, aligned to its size.

The arena need not be a power of two: it is cut into power-of-two roots,
largest first, so each root starts at a multiple of its own size and the
buddy of a block at offset `o` of size `s` is always `o ^ s`.
"""
from __future__ import annotations

from bisect import bisect_left, insort


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


class BuddyAllocator:
    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._free: dict[int, list[int]] = {}   # block size -> sorted offsets of free blocks
        self._used: dict[int, int] = {}         # offset -> block size
        self._root_sizes: list[int] = []
        offset = 0
        for bit in reversed(range(capacity.bit_length())):
            size = 1 << bit
            if capacity & size:
                self._free.setdefault(size, []).append(offset)
                self._root_sizes.append(size)
                offset += size

    @property
    def max_region(self) -> int:
        return self._root_sizes[0]

    def rounded(self, size: int) -> int:
        return next_pow2(size)

    def allocate(self, size: int) -> int | None:
        """Offset of a free block of next_pow2(size) slots, or None if no block is large enough."""
        want = next_pow2(size)
        block = want
        while block <= self.max_region and not self._free.get(block):
            block <<= 1
        if block > self.max_region:
            return None
        offset = self._free[block].pop(0)
        while block > want:  # split, keeping the lower half and freeing the upper
            block >>= 1
            insort(self._free.setdefault(block, []), offset + block)
        self._used[offset] = want
        return offset

    def free(self, offset: int) -> None:
        size = self._used.pop(offset)
        while size < self.max_region:
            buddy = offset ^ size
            peers = self._free.get(size, [])
            i = bisect_left(peers, buddy)
            if i == len(peers) or peers[i] != buddy:
                break
            peers.pop(i)
            offset = min(offset, buddy)
            size <<= 1
        insort(self._free.setdefault(size, []), offset)

    def holes(self) -> list[int]:
        """Sizes of the free blocks: the largest regions that could be handed out whole."""
        return [size for size, offsets in self._free.items() for _ in offsets]

    def free_blocks(self) -> list[tuple[int, int]]:
        return sorted((o, s) for s, offsets in self._free.items() for o in offsets)
