"""The paged manager's memory split, kept as running sums fed by share, release and growth events.

The split (`engines/kv/memory_split.py`) counts physical slots, but the
cheap sums are per row: over every row's table, the slots it will fill
(min(allocated, final length)) and the slots allocated. A block shared by
several rows (or by the prefix cache) is counted once per reference in
those sums; each extra reference is recorded as it is taken (`shared`)
and dropped (`unshared`), with the block's stored and will-fill slots, so
the physical totals are the per-row sums less the repeats. The block
tables report every event; nothing here walks the tables except
`pending`, over the groups of several rows only.
"""
from __future__ import annotations

from pagedbench.engines.kv.block_pool import BlockPool
from pagedbench.engines.kv.memory_split import MemorySplit, split_totals
from pagedbench.engines.sequence import Sequence


class SplitLedger:
    def __init__(self, capacity: int, block_size: int):
        self.capacity = capacity
        self.block_size = block_size
        self.will_fill = 0        # over every row table: min(allocated slots, final length)
        self.logical_slots = 0    # over every row table: allocated slots (what the rows take without sharing)
        self.dup_stored = 0       # over shared blocks: (references - 1) x the block's stored slots
        self.dup_will = 0         # over shared blocks: (references - 1) x the block's will-fill slots
        self.wide: dict[int, Sequence] = {}   # held groups of several rows

    def _fill(self, index: int, length: int) -> int:
        """Slots of the index-th block a row of `length` stored tokens fills."""
        return min(self.block_size, max(0, length - index * self.block_size))

    @staticmethod
    def kv_len(seq: Sequence) -> int:
        """Positions a row's blocks hold in common with the rows it shares them with: its prompt before the
        first step, then every position but the last, the token each row produced itself. A shared block's
        part of this never changes while it is shared: a row writes past it only after copy-on-write."""
        return seq.prompt_len + seq.generated - (1 if seq.generated else 0)

    def shared(self, index: int, seq: Sequence) -> None:
        """One more reference to the index-th block of a row of `seq`."""
        self.dup_stored += self._fill(index, self.kv_len(seq))
        self.dup_will += self._fill(index, seq.final_len)

    def unshared(self, index: int, seq: Sequence) -> None:
        """One reference fewer to a block that stays referenced."""
        self.dup_stored -= self._fill(index, self.kv_len(seq))
        self.dup_will -= self._fill(index, seq.final_len)

    def rows_added(self, seq: Sequence, tables: list[list[int]]) -> None:
        bs, final = self.block_size, seq.final_len
        if seq.width > 1:
            self.wide[seq.id] = seq
        for table in tables:
            self.will_fill += min(len(table) * bs, final)
            self.logical_slots += len(table) * bs

    def rows_dropped(self, seq: Sequence, tables: list[list[int]]) -> None:
        bs, final = self.block_size, seq.final_len
        self.wide.pop(seq.id, None)
        for table in tables:
            self.will_fill -= min(len(table) * bs, final)
            self.logical_slots -= len(table) * bs

    def row_resized(self, seq: Sequence, old_blocks: int, new_blocks: int) -> None:
        """A row's table went from `old_blocks` to `new_blocks` blocks (a new block, a fork's new lineage)."""
        bs, final = self.block_size, seq.final_len
        self.will_fill += min(new_blocks * bs, final) - min(old_blocks * bs, final)
        self.logical_slots += (new_blocks - old_blocks) * bs

    def pending(self, tables: dict[int, list[list[int]]], refs: list[int]) -> int:
        """Tokens the rows produced whose slot is still in a block shared with another row: they get a slot
        when the next step copies the block (copy-on-write); until then one of them is counted."""
        pending, bs = 0, self.block_size
        for seq in self.wide.values():
            if not seq.generated:
                continue
            index = (seq.prompt_len + seq.generated - 1) // bs
            seen = set()
            for table in tables[seq.id]:
                block = table[index]
                if block not in seen and refs[block] > 1:
                    seen.add(block)
                    pending += refs[block] - 1
        return pending

    def split(self, pool: BlockPool, tables: dict[int, list[list[int]]], stored: int) -> MemorySplit:
        """The split, given the tokens the held rows store (a shared block's tokens counted once per row)."""
        bs = self.block_size
        allocated = (pool.num_blocks - pool.num_free) * bs
        cached = pool.num_cached * bs
        physical = stored + cached - self.dup_stored - (self.pending(tables, pool.ref_counts) if self.wide else 0)
        will_fill = self.will_fill + cached - self.dup_will
        # Any free block serves any request: no free block is too small or out of place.
        return split_totals(self.capacity, physical, will_fill, allocated, allocated, pool.num_free * bs, 0)
