"""BlockPool: fixed-size KV blocks with reference counts, handed out one at a time."""
from __future__ import annotations

from collections import deque


class BlockPool:
    """`num_blocks` physical blocks of `block_size` token slots each.

    A block is free when its reference count is zero. Reference counts let
    several sequences share a block (forked samples, beams, shared prefixes).
    """

    def __init__(self, num_blocks: int, block_size: int):
        if block_size < 1 or block_size & (block_size - 1):
            raise ValueError(f"block_size must be a power of two, got {block_size}")
        if num_blocks < 1:
            raise ValueError(f"the pool needs at least one block, got {num_blocks}")
        self.num_blocks = num_blocks
        self.ref_counts = [0] * num_blocks
        self._free: deque[int] = deque(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        if not self._free:
            raise MemoryError("no free KV block")
        block = self._free.popleft()
        self.ref_counts[block] = 1
        return block

    def share(self, block: int) -> None:
        if self.ref_counts[block] < 1:
            raise ValueError(f"block {block} is free; cannot share it")
        self.ref_counts[block] += 1

    def release(self, block: int) -> None:
        count = self.ref_counts[block]
        if count < 1:
            raise ValueError(f"block {block} released more often than allocated")
        self.ref_counts[block] = count - 1
        if count == 1:
            self._free.append(block)


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)
