"""KV memory for the paged engine: block tables over a BlockPool, one block allocated as a sequence needs it."""
from __future__ import annotations

from engines.kv.block_pool import BlockPool, blocks_for
from engines.kv.memory_split import MemorySplit, split_totals
from engines.sequence import Sequence


class PagedKV:
    def __init__(self, capacity: int, block_size: int, watermark: float = 0.01):
        self.capacity = capacity
        self.pool = BlockPool(capacity // block_size, block_size)
        self.block_size = block_size
        # Admission leaves this many blocks free for running sequences to grow into (vLLM's watermark).
        self.watermark_blocks = int(watermark * self.pool.num_blocks)
        self.block_tables: dict[int, list[int]] = {}
        self._will_fill = 0   # sum over held sequences of min(allocated slots, final length)

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
        self._will_fill += min(need * self.block_size, seq.final_len)
        return True

    def grow(self, seq: Sequence) -> bool:
        """Make room for the token the next iteration produces: one more block when the last is full."""
        return self.grow_all([seq]) == 1

    def grow_all(self, seqs: list[Sequence], start: int = 0) -> int:
        """`grow` each of seqs[start:] in order; the index of the first that cannot grow, or len(seqs).

        The decode step's hot loop: one call per iteration, not one per sequence.
        """
        tables, bs, pool = self.block_tables, self.block_size, self.pool
        for i in range(start, len(seqs)):
            seq = seqs[i]
            table = tables[seq.id]
            slots = len(table) * bs
            if seq.prompt_len + seq.generated < slots:
                continue
            if pool.num_free == 0:
                return i
            table.append(pool.allocate())
            final = seq.final_len
            self._will_fill += min(slots + bs, final) - min(slots, final)
        return len(seqs)

    def free(self, seq: Sequence) -> None:
        table = self.block_tables.pop(seq.id)
        self._will_fill -= min(len(table) * self.block_size, seq.final_len)
        for block in table:
            self.pool.release(block)

    def slots(self, seq: Sequence, start: int, end: int) -> list[int]:
        """Flat cache slots (block * block_size + offset) of positions start..end-1 of `seq`."""
        table, bs = self.block_tables[seq.id], self.block_size
        return [table[p // bs] * bs + p % bs for p in range(start, end)]

    def holds(self, seq: Sequence) -> bool:
        return seq.id in self.block_tables

    def split(self, held, next_waiting: Sequence | None, stored: int | None = None) -> MemorySplit:
        """The split with `held` the sequences holding blocks; `stored`, if the caller keeps it, their tokens."""
        bs = self.block_size
        if len(held) != len(self.block_tables):
            raise ValueError(f"split of {len(held)} sequences; the manager holds {len(self.block_tables)}")
        if stored is None:
            stored = sum(s.prompt_len + s.generated for s in held)
        allocated = (self.pool.num_blocks - self.pool.num_free) * bs
        # Any free block serves any request: no free block is too small or out of place.
        return split_totals(self.capacity, stored, self._will_fill, allocated, allocated,
                            self.pool.num_free * bs, 0)
