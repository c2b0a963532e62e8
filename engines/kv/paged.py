"""KV memory for the paged engine: block tables over a BlockPool, one block allocated as a sequence needs it."""
from __future__ import annotations

from engines.kv.block_pool import BlockPool, blocks_for
from engines.kv.memory_split import Holding, MemorySplit, split_memory
from engines.sequence import Sequence


class PagedKV:
    def __init__(self, capacity: int, block_size: int, watermark: float = 0.01):
        self.capacity = capacity
        self.pool = BlockPool(capacity // block_size, block_size)
        self.block_size = block_size
        # Admission leaves this many blocks free for running sequences to grow into (vLLM's watermark).
        self.watermark_blocks = int(watermark * self.pool.num_blocks)
        self.block_tables: dict[int, list[int]] = {}

    recomputes = True   # a sequence that cannot grow is preempted and recomputed

    def describe(self) -> str:
        return (f"block pool of {self.pool.num_blocks:,} blocks x {self.block_size} slots, "
                f"admission watermark {self.watermark_blocks} blocks")

    def rejection(self, seq: Sequence) -> str | None:
        need = blocks_for(seq.final_len, self.block_size)
        if need + self.watermark_blocks > self.pool.num_blocks:
            return f"needs {need} blocks of {self.block_size} slots; the pool has {self.pool.num_blocks}"
        return None

    def try_admit(self, seq: Sequence) -> bool:
        """Allocate blocks for the tokens to prefill and the token the prefill produces."""
        need = blocks_for(seq.length + 1, self.block_size)
        if need + self.watermark_blocks > self.pool.num_free:
            return False
        self.block_tables[seq.id] = [self.pool.allocate() for _ in range(need)]
        return True

    def grow(self, seq: Sequence) -> bool:
        """Make room for the token the next iteration produces: one more block when the last is full."""
        table = self.block_tables[seq.id]
        if seq.length + 1 <= len(table) * self.block_size:
            return True
        if self.pool.num_free == 0:
            return False
        table.append(self.pool.allocate())
        return True

    def free(self, seq: Sequence) -> None:
        for block in self.block_tables.pop(seq.id):
            self.pool.release(block)

    def slots(self, seq: Sequence, start: int, end: int) -> list[int]:
        """Flat cache slots (block * block_size + offset) of positions start..end-1 of `seq`."""
        table, bs = self.block_tables[seq.id], self.block_size
        return [table[p // bs] * bs + p % bs for p in range(start, end)]

    def holds(self, seq: Sequence) -> bool:
        return seq.id in self.block_tables

    def split(self, held: list[Sequence], next_waiting: Sequence | None) -> MemorySplit:
        bs = self.block_size
        holdings = []
        for s in held:
            slots = len(self.block_tables[s.id]) * bs
            holdings.append(Holding(s.length, s.final_len, slots, slots))
        # Any free block serves any request: no free block is too small or out of place.
        return split_memory(self.capacity, holdings, self.pool.num_free * bs, 0)
