"""Host swap: a preempted group's blocks move to a host (CPU) block pool and back.

`swap_out` moves a group's distinct private blocks to the host pool of
`num_cpu_blocks` (a block several rows share moves once), `swap_in` brings
them back; each move is queued in the block tables' `moves` for the
executor, which charges or performs it. A group's cached prefix blocks stay
on the device, where it keeps one reference to them while swapped
(`swap_kept`: the prefix cannot be evicted meanwhile), and its rows share
them again on swap-in. With nothing running and no swapped group fitting,
`spill_kept` moves those kept blocks to the host too.
"""
from __future__ import annotations

from pagedbench.engines.kv.block_pool import BlockPool
from pagedbench.engines.kv.block_tables import BlockTables
from pagedbench.engines.sequence import Sequence


def distinct(tables: list[list[int]]) -> list[int]:
    return list(dict.fromkeys(b for table in tables for b in table))


class HostSwap:
    def __init__(self, device: BlockTables, num_cpu_blocks: int):
        self.device = device
        self.cpu_pool = BlockPool(num_cpu_blocks, device.block_size) if num_cpu_blocks > 0 else None
        self.cpu_tables: dict[int, list[list[int]]] = {}     # swapped-out requests: tables of host blocks
        self.swap_kept: dict[int, list[int]] = {}            # swapped-out request id -> cached blocks it keeps

    def _kept(self, seq: Sequence, tables: list[list[int]]) -> int:
        """How many leading blocks of every row are the cached blocks of the group's prefix: a swap leaves them
        on the device."""
        cached = self.device.pool.cached.get(seq.prefix_id, ()) if seq.prefix_id is not None else ()
        kept = 0
        while kept < len(cached) and all(kept < len(t) and t[kept] == cached[kept] for t in tables):
            kept += 1
        return kept

    def can_swap_out(self, seq: Sequence) -> bool:
        if self.cpu_pool is None:
            return False
        tables = self.device.block_tables[seq.id]
        kept = self._kept(seq, tables)
        return len(distinct([t[kept:] for t in tables])) <= self.cpu_pool.num_free

    def swap_out(self, seq: Sequence) -> int:
        """Move the group's distinct private blocks to the host pool (shared blocks move once); its cached
        prefix blocks stay on the device, one reference kept for the group. The blocks moved."""
        if not self.can_swap_out(seq):
            raise MemoryError(f"request {seq.id}: the host pool cannot hold its blocks")
        device, cpu_pool = self.device, self.cpu_pool
        tables = device.take(seq)
        kept = self._kept(seq, tables)
        if kept:
            self.swap_kept[seq.id] = tables[0][:kept]
            for block in tables[0][:kept]:
                device.pool.share(block)   # not a row: the split's repeats are the rows' and the cache's only
        self.cpu_tables[seq.id], moved = self._remap([t[kept:] for t in tables], kept, cpu_pool, "out",
                                                     lambda block, index: cpu_pool.share(block))
        device.drop_rows(seq, tables)
        return moved

    def can_swap_in(self, seq: Sequence, watermark: bool = True) -> bool:
        """Room for the group's host blocks and for its next decode step (its copies and new blocks, counted
        on the host tables, whose sharing the device tables keep), above the watermark unless told otherwise;
        unused cached prefixes count as room."""
        device, tables = self.device, self.cpu_tables[seq.id]
        step = device.group_needs(tables, seq.prompt_len + seq.generated, self.cpu_pool.ref_counts,
                                  len(self.swap_kept.get(seq.id, ())))
        need = len(distinct(tables)) + step
        return need + (device.watermark_blocks if watermark else 0) <= device.pool.num_available

    def swap_in(self, seq: Sequence) -> int:
        """Bring a swapped group's host blocks back to the device pool, its rows sharing again the cached
        prefix blocks it kept; the blocks moved."""
        device, pool = self.device, self.device.pool
        tables = self.cpu_tables.pop(seq.id)
        if len(distinct(tables)) > pool.num_available:
            raise MemoryError(f"request {seq.id}: the device pool cannot hold its blocks")
        kept = self.swap_kept.pop(seq.id, [])
        if kept:
            pool.lookup(seq.prefix_id)   # most recently used again
        # Take device blocks first (device sharing goes to the ledger), then free the host ones.
        new_tables, moved = self._remap(tables, len(kept), pool, "in",
                                        lambda block, index: device.share(block, index, seq))
        for row in new_tables:
            for index, block in enumerate(kept):
                device.share(block, index, seq)
            row[:0] = kept
        for block in kept:
            pool.release(block)     # the reference the group kept while swapped
        for table in tables:
            for block in table:
                self.cpu_pool.release(block)
        device.put(seq, new_tables)
        return moved

    def spill_kept(self, seq: Sequence) -> int:
        """Move the cached prefix blocks a swapped group keeps on the device to the host pool as well (a copy
        each; the cache keeps its own reference, so they stay cached and become evictable): the room another
        group needs when nothing runs. The group comes back with private copies of them. The blocks moved: 0
        when it keeps none or the host pool cannot take them."""
        kept = self.swap_kept.get(seq.id)
        if not kept or len(kept) > self.cpu_pool.num_free:
            return 0
        del self.swap_kept[seq.id]
        rows = self.cpu_tables[seq.id]
        host = [self.cpu_pool.allocate() for _ in kept]
        for block, copy in zip(kept, host):
            self.device.moves.append(("out", block, copy))
            self.device.pool.release(block)     # the reference the group kept while swapped
            for _ in rows[1:]:
                self.cpu_pool.share(copy)
        self.cpu_tables[seq.id] = [host + row for row in rows]
        return len(kept)

    def drop_swapped(self, seq: Sequence) -> None:
        """Forget a swapped-out group (its request was dropped): its host blocks and the device references to
        the cached prefix blocks it kept are released; nothing moves."""
        for table in self.cpu_tables.pop(seq.id):
            for block in table:
                self.cpu_pool.release(block)
        for block in self.swap_kept.pop(seq.id, []):
            self.device.pool.release(block)     # the reference the group kept while swapped

    def _remap(self, tables, start: int, pool: BlockPool, kind: str, share) -> tuple[list[list[int]], int]:
        """Give each distinct block of `tables` (rows from table index `start` on) a new block of `pool`, queued
        as a `kind` move; a block met again is shared (`share(new block, index)`). The tables of new blocks,
        and how many blocks move."""
        mapping: dict[int, int] = {}
        out = []
        for table in tables:
            row = []
            for index, block in enumerate(table, start):
                if block in mapping:
                    share(mapping[block], index)
                else:
                    mapping[block] = pool.allocate()
                    self.device.moves.append((kind, block, mapping[block]))
                row.append(mapping[block])
            out.append(row)
        return out, len(mapping)
