"""BlockPool: fixed-size KV blocks with reference counts, a free queue, and the cached blocks kept for reuse.

A block is free when its reference count is zero. Reference counts let
several sequences share a block (forked samples, beams, shared prefixes).

The pool also keeps cached blocks (`cache`): the full blocks of a shared
prompt prefix, under the prefix's key, with one reference the pool holds
for them, so they outlive the request that computed them. A cached entry
no sequence holds (each of its blocks referenced by the pool alone) is
evictable: as in vLLM's block pool, such entries stand in the free queue
behind the free blocks, least recently used first (`lookup` moves an entry
to the back), and are evicted lazily when an allocation finds no free block
(`allocate`), or up front when a caller must see free blocks (`reserve`).
`num_available` counts both: what a step may take. No other code evicts.
"""
from __future__ import annotations

from collections import deque


class BlockPool:
    """`num_blocks` physical blocks of `block_size` token slots each."""

    def __init__(self, num_blocks: int, block_size: int):
        if block_size < 1 or block_size & (block_size - 1):
            raise ValueError(f"block_size must be a power of two, got {block_size}")
        if num_blocks < 1:
            raise ValueError(f"the pool needs at least one block, got {num_blocks}")
        self.num_blocks = num_blocks
        self.ref_counts = [0] * num_blocks
        self._free: deque[int] = deque(range(num_blocks))
        self.cached: dict[int, list[int]] = {}   # key -> its cached blocks, least recently used first
        self.num_cached = 0                      # blocks of every cached entry

    @property
    def num_free(self) -> int:
        """Blocks no one references (cached blocks not included)."""
        return len(self._free)

    def allocate(self) -> int:
        """A block with one reference: a free one, else one of the least recently used evictable entry."""
        if not self._free and not self._evict_one():
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

    # -- cached blocks ------------------------------------------------------------------------------

    def cache(self, key: int, blocks: list[int]) -> None:
        """Keep `blocks` under `key` (most recently used), the pool holding one reference to each."""
        for block in blocks:
            self.share(block)
        self.cached[key] = blocks
        self.num_cached += len(blocks)

    def lookup(self, key: int | None) -> list[int]:
        """The blocks cached under `key` (none if not cached), marked as the most recently used."""
        if key is None or key not in self.cached:
            return []
        blocks = self.cached[key] = self.cached.pop(key)   # to the end: the LRU order
        return blocks

    def _evictable(self, blocks: list[int]) -> bool:
        refs = self.ref_counts
        return all(refs[b] == 1 for b in blocks)

    @property
    def num_evictable(self) -> int:
        """Blocks of the cached entries no sequence holds: what eviction could free."""
        return sum(len(blocks) for blocks in self.cached.values() if self._evictable(blocks))

    @property
    def num_available(self) -> int:
        """Blocks an allocation can get: the free ones and the evictable cached ones."""
        return len(self._free) + (self.num_evictable if self.cached else 0)

    def _evict_one(self, keep: int | None = None) -> bool:
        """Evict the least recently used entry no sequence holds (never `keep`); False if there is none."""
        for key, blocks in self.cached.items():
            if key != keep and self._evictable(blocks):
                self._drop(key)
                return True
        return False

    def _drop(self, key: int) -> None:
        blocks = self.cached.pop(key)
        self.num_cached -= len(blocks)
        for block in blocks:
            self.release(block)   # the pool's reference, the only one: the block is free

    def reserve(self, need: int, keep: int | None = None) -> bool:
        """Make `need` blocks free now, evicting the least recently used entries no sequence holds (never
        `keep`); evict nothing and say False if that cannot free enough."""
        short = need - len(self._free)
        if short <= 0:
            return True
        chosen = []
        for key, blocks in self.cached.items():
            if key != keep and self._evictable(blocks):
                chosen.append(key)
                short -= len(blocks)
                if short <= 0:
                    break
        if short > 0:
            return False
        for key in chosen:
            self._drop(key)
        return True


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)
