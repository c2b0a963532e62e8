"""KV memory for the paged engine: block tables over a BlockPool, one block allocated as a sequence needs it.

Every row of a request (its parallel samples or beams) has its own block
table; tables share physical blocks by reference count:

- a group's rows share its prompt's blocks from admission (the prompt is
  prefilled once);
- a beam step re-forms the rows (`fork`): each new row takes its parent's
  table, sharing every block, and the rows no beam descends from are freed;
- a row about to write into a shared block gets its own copy first
  (copy-on-write, in `grow_all`); the copy is queued for the next
  iteration's executor (`drain_into`), which charges or performs it;
- requests with the same shared prefix (`prefix_id`) map their first blocks
  to the prefix's blocks, computed by the first such request and then kept
  by the prefix cache (full blocks only: a partial block would be written).
  A cached prefix no group holds is evicted, least recently used first, when
  admission, growth or a swap-in needs its blocks (`_evict`); the next
  request of that prefix computes and caches it again.

A preempted group can be swapped: its distinct private blocks move to a host
(CPU) pool of `num_cpu_blocks` and back (`swap_out`, `swap_in`), again as
transfers for the executor. Its cached prefix blocks stay on the device,
where the group keeps one reference to them while swapped (`swap_kept`: the
prefix cannot be evicted meanwhile), and its rows share them again on
swap-in.

The memory split counts physical slots: a block shared by several tables
is counted once. `usage()` gives the slots the tables would need without
any sharing beside the slots allocated: the paper's memory saving.
"""
from __future__ import annotations

from engines.kv.block_pool import BlockPool, blocks_for
from engines.kv.memory_split import MemorySplit, split_totals
from engines.sequence import Sequence


class PagedKV:
    def __init__(self, capacity: int, block_size: int, watermark: float = 0.01, num_cpu_blocks: int = 0):
        self.capacity = capacity
        self.pool = BlockPool(capacity // block_size, block_size)
        self.block_size = block_size
        # Admission leaves this many blocks free for running sequences to grow into (vLLM's watermark).
        self.watermark_blocks = int(watermark * self.pool.num_blocks)
        self.cpu_pool = BlockPool(num_cpu_blocks, block_size) if num_cpu_blocks > 0 else None
        self.block_tables: dict[int, list[list[int]]] = {}   # request id -> one table per row
        self.cpu_tables: dict[int, list[list[int]]] = {}     # swapped-out requests: tables of host blocks
        self.prefix_blocks: dict[int, list[int]] = {}        # prefix id -> its cached (full) blocks, LRU first
        self.swap_kept: dict[int, list[int]] = {}            # swapped-out request id -> cached blocks it keeps
        self._cached_tokens: dict[int, int] = {}             # request id -> prefix tokens found in the cache
        # Running sums over every row table: min(allocated slots, final length), and allocated slots.
        self._will_fill = 0
        self._logical_slots = 0
        # Over shared blocks, sum of (references - 1) x the block's stored / will-fill slots: what the
        # per-row sums count more than once.
        self._dup_stored = 0
        self._dup_will = 0
        self._prefix_slots = 0   # slots of the blocks the prefix cache keeps
        self._wide: dict[int, Sequence] = {}   # held groups of several rows
        # Block moves for the next iteration ("copy" on write, swap "out", swap "in": source, destination) in
        # the order they were decided: a block freed by one may be the destination of a later one.
        self._moves: list[tuple[str, int, int]] = []

    paged = True   # block tables; a sequence that cannot grow is preempted (recomputed or swapped)

    @property
    def host_blocks(self) -> int:
        """Blocks of the host pool that swapped groups move to; 0 without one."""
        return self.cpu_pool.num_blocks if self.cpu_pool is not None else 0

    def describe(self) -> str:
        swap = f", host pool of {self.cpu_pool.num_blocks:,} blocks" if self.cpu_pool else ", no host pool"
        return (f"block pool of {self.pool.num_blocks:,} blocks x {self.block_size} slots, "
                f"admission watermark {self.watermark_blocks} blocks{swap}")

    def rejection(self, seq: Sequence) -> str | None:
        need = seq.width * blocks_for(seq.final_len, self.block_size)
        if need + self.watermark_blocks > self.pool.num_blocks:
            rows = f" ({seq.width} rows, unshared)" if seq.width > 1 else ""
            return (f"needs {need} blocks of {self.block_size} slots{rows}; the pool has "
                    f"{self.pool.num_blocks}")
        return None

    # -- accounting helpers -------------------------------------------------------------------------

    def _fill(self, index: int, length: int) -> int:
        """Slots of the index-th block a row of `length` stored tokens fills."""
        return min(self.block_size, max(0, length - index * self.block_size))

    @staticmethod
    def _kv_len(seq: Sequence) -> int:
        """Positions a row's blocks hold in common with the rows it shares them with: its prompt before the
        first step, then every position but the last, the token each row produced itself. A shared block's
        part of this never changes while it is shared: a row writes past it only after copy-on-write."""
        return seq.prompt_len + seq.generated - (1 if seq.generated else 0)

    def _share(self, block: int, index: int, seq: Sequence) -> None:
        self.pool.share(block)
        self._dup_stored += self._fill(index, self._kv_len(seq))
        self._dup_will += self._fill(index, seq.final_len)

    def _release(self, block: int, index: int, seq: Sequence) -> None:
        if self.pool.ref_counts[block] > 1:
            self._dup_stored -= self._fill(index, self._kv_len(seq))
            self._dup_will -= self._fill(index, seq.final_len)
        self.pool.release(block)

    def _pending(self) -> int:
        """Tokens the rows produced whose slot is still in a block shared with another row: they get a slot
        when the next step copies the block (copy-on-write); until then one of them is counted."""
        pending, bs, refs = 0, self.block_size, self.pool.ref_counts
        for seq in self._wide.values():
            if not seq.generated:
                continue
            index = (seq.prompt_len + seq.generated - 1) // bs
            seen = set()
            for table in self.block_tables[seq.id]:
                block = table[index]
                if block not in seen and refs[block] > 1:
                    seen.add(block)
                    pending += refs[block] - 1
        return pending

    def _add_rows(self, seq: Sequence, tables: list[list[int]]) -> None:
        bs, final = self.block_size, seq.final_len
        if seq.width > 1:
            self._wide[seq.id] = seq
        for table in tables:
            self._will_fill += min(len(table) * bs, final)
            self._logical_slots += len(table) * bs

    def _drop_rows(self, seq: Sequence, tables: list[list[int]]) -> None:
        bs, final = self.block_size, seq.final_len
        self._wide.pop(seq.id, None)
        for table in tables:
            self._will_fill -= min(len(table) * bs, final)
            self._logical_slots -= len(table) * bs
            for index, block in enumerate(table):
                self._release(block, index, seq)

    # -- admission, growth, release ------------------------------------------------------------------

    def try_admit(self, seq: Sequence) -> bool:
        """Allocate blocks for the tokens to prefill and the token the prefill produces; every row of the
        group shares them. A cached shared prefix supplies the first blocks."""
        if seq.width > 1 and seq.generated:
            raise RuntimeError(f"request {seq.id}: a group of {seq.width} sequences cannot be recomputed; "
                               f"it must be swapped")
        bs = self.block_size
        cached = self._touch(seq.prefix_id)
        shared = blocks_for(seq.length, bs) - len(cached)       # the prompt's blocks, which every row shares
        own = 1 if seq.length % bs == 0 else 0                  # the produced token starts a block: one per row
        need = shared + own * seq.width + self.watermark_blocks - self.pool.num_free
        if need > 0 and not self._evict(need, seq.prefix_id):
            return False
        table = list(cached)
        for index, block in enumerate(cached):
            self._share(block, index, seq)
        table += [self.pool.allocate() for _ in range(shared)]
        tables = [table]
        for _ in range(seq.width - 1):
            tables.append(list(table))
            for index, block in enumerate(table):
                self._share(block, index, seq)
        if own:
            for row in tables:
                row.append(self.pool.allocate())
        self.block_tables[seq.id] = tables
        self._add_rows(seq, tables)
        if cached:
            self._cached_tokens[seq.id] = len(cached) * bs
        return True

    def _touch(self, prefix_id: int | None) -> list[int]:
        """The cached blocks of a prefix (none if not cached), marked as the most recently used."""
        if prefix_id is None or prefix_id not in self.prefix_blocks:
            return []
        blocks = self.prefix_blocks[prefix_id] = self.prefix_blocks.pop(prefix_id)   # to the end: the LRU order
        return blocks

    def _evict(self, need: int, keep: int | None = None) -> bool:
        """Make `need` more blocks free by evicting cached prefixes no group holds (every block referenced by
        the cache alone), least recently used first, never prefix `keep` (the one being admitted maps it);
        evict nothing and say False if they cannot free that many."""
        if need <= 0:
            return True
        if not self.prefix_blocks:
            return False
        refs, unused = self.pool.ref_counts, []
        for prefix_id, blocks in self.prefix_blocks.items():
            if prefix_id != keep and all(refs[b] == 1 for b in blocks):
                unused.append(prefix_id)
                need -= len(blocks)
                if need <= 0:
                    break
        if need > 0:
            return False
        for prefix_id in unused:
            blocks = self.prefix_blocks.pop(prefix_id)
            for block in blocks:
                self.pool.release(block)   # the cache's reference, the only one: no row's repeat to remove
            self._prefix_slots -= len(blocks) * self.block_size
        return True

    def _evictable(self) -> int:
        """Blocks of the cached prefixes no group holds: what `_evict` could free."""
        refs = self.pool.ref_counts
        return sum(len(blocks) for blocks in self.prefix_blocks.values() if all(refs[b] == 1 for b in blocks))

    def cached_tokens(self, seq: Sequence) -> int:
        """Prompt tokens of an admitted request already in the cache (its shared prefix): not prefilled."""
        return self._cached_tokens.get(seq.id, 0)

    def prefilled(self, seq: Sequence) -> None:
        """After `seq`'s prefill: the first request of a shared prefix hands its full prefix blocks to the
        prefix cache, which keeps them for every later request of that prefix."""
        self._cached_tokens.pop(seq.id, None)
        if seq.prefix_id is None or seq.prefix_id in self.prefix_blocks:
            return
        full = seq.prefix_len // self.block_size
        if full == 0:
            return
        blocks = self.block_tables[seq.id][0][:full]
        for index, block in enumerate(blocks):
            self._share(block, index, seq)   # full blocks: the cache's reference repeats bs slots
        self.prefix_blocks[seq.prefix_id] = blocks
        self._prefix_slots += full * self.block_size

    def grow(self, seq: Sequence) -> bool:
        """Make room for the token the next iteration produces: one more block when the last is full."""
        return self.grow_all([seq]) == 1

    def grow_all(self, seqs: list[Sequence], start: int = 0) -> int:
        """Ready each row of seqs[start:] for a decode step, in order; the index of the first group that
        cannot get a block it needs, or len(seqs).

        A row writes the token it is fed at position length - 1: a shared block there is copied first
        (copy-on-write). The token the step produces needs a slot at position length: a new block when
        the table is full. The decode step's hot loop: one call per iteration, not one per sequence.
        """
        tables, bs, pool = self.block_tables, self.block_size, self.pool
        refs = pool.ref_counts
        for i in range(start, len(seqs)):
            seq = seqs[i]
            length = seq.prompt_len + seq.generated
            rows = tables[seq.id]
            if len(rows) == 1:                     # one row: no block of it at length - 1 is shared
                table = rows[0]
                slots = len(table) * bs
                if length < slots:
                    continue
                if pool.num_free == 0 and not self._evict(1):
                    return i
                self._append_block(table, seq)
                continue
            # A group is readied whole or not at all: count what it needs before taking anything.
            if not self._evict(self._group_needs(rows, length) - pool.num_free):
                return i
            last = (length - 1) // bs
            for table in rows:
                block = table[last]
                if refs[block] > 1:
                    copy = pool.allocate()
                    self._moves.append(("copy", block, copy))
                    table[last] = copy
                    self._release(block, last, seq)
                if length >= len(table) * bs:
                    self._append_block(table, seq)
        return len(seqs)

    def _append_block(self, table: list[int], seq: Sequence) -> None:
        """A new block at the end of a row's table (the pool has one free)."""
        slots, bs, final = len(table) * self.block_size, self.block_size, seq.final_len
        table.append(self.pool.allocate())
        self._will_fill += min(slots + bs, final) - min(slots, final)
        self._logical_slots += bs

    def _group_needs(self, rows: list[list[int]], length: int, refs: list[int] | None = None,
                     skipped: int = 0) -> int:
        """Blocks a group's decode step takes: a copy for each row writing into a block still shared after
        the rows before it copied theirs, and a new block for each full table. `refs`: the reference counts
        of the rows' blocks (the device pool's by default); `skipped`: blocks at the front of every row not
        in `rows` (a swapped group's kept prefix)."""
        bs = self.block_size
        refs = self.pool.ref_counts if refs is None else refs
        last = (length - 1) // bs - skipped
        writers: dict[int, int] = {}
        need = 0
        for table in rows:
            writers[table[last]] = writers.get(table[last], 0) + 1
            if length >= (skipped + len(table)) * bs:
                need += 1
        for block, count in writers.items():
            need += min(count, refs[block] - 1)
        return need

    def share_prompt(self, seq: Sequence) -> None:
        """After a group's prefill: nothing to do, its rows have shared the prompt's blocks since admission."""

    def fork(self, seq: Sequence, parents: list[int]) -> None:
        """Re-form the rows after a beam step: new row i continues row parents[i], sharing its blocks.

        Rows descend from one prompt, so two rows' tables agree up to where their histories split and
        differ after it: only that tail changes hands (shares first, then releases, so a block both rows
        keep is never freed in between)."""
        old = self.block_tables[seq.id]
        if len(parents) != len(old):
            raise ValueError(f"request {seq.id}: {len(parents)} parents for {len(old)} rows")
        changes = []
        for row, parent in enumerate(parents):
            src, dst = old[parent], old[row]
            if src is dst or src == dst:
                continue
            split = min(len(src), len(dst))
            while split and src[split - 1] != dst[split - 1]:
                split -= 1
            changes.append((row, parent, split))
        if not changes:
            return
        bs, final = self.block_size, seq.final_len
        new = list(old)
        for row, parent, split in changes:
            src = old[parent]
            for index in range(split, len(src)):
                self._share(src[index], index, seq)
            new[row] = list(src)
        for row, parent, split in changes:
            dst, src = old[row], old[parent]
            for index in range(split, len(dst)):
                self._release(dst[index], index, seq)
            self._will_fill += min(len(src) * bs, final) - min(len(dst) * bs, final)
            self._logical_slots += (len(src) - len(dst)) * bs
        self.block_tables[seq.id] = new

    def free(self, seq: Sequence) -> None:
        self._cached_tokens.pop(seq.id, None)
        self._drop_rows(seq, self.block_tables.pop(seq.id))

    # -- swapping ------------------------------------------------------------------------------------

    def _distinct(self, tables: list[list[int]]) -> list[int]:
        return list(dict.fromkeys(b for table in tables for b in table))

    def _kept(self, seq: Sequence, tables: list[list[int]]) -> int:
        """How many leading blocks of every row are the cached blocks of the group's prefix: a swap leaves them
        on the device."""
        cached = self.prefix_blocks.get(seq.prefix_id, ()) if seq.prefix_id is not None else ()
        kept = 0
        while kept < len(cached) and all(kept < len(t) and t[kept] == cached[kept] for t in tables):
            kept += 1
        return kept

    def can_swap_out(self, seq: Sequence) -> bool:
        if self.cpu_pool is None:
            return False
        tables = self.block_tables[seq.id]
        kept = self._kept(seq, tables)
        return len(self._distinct([t[kept:] for t in tables])) <= self.cpu_pool.num_free

    def swap_out(self, seq: Sequence) -> int:
        """Move the group's distinct private blocks to the host pool (shared blocks move once); its cached
        prefix blocks stay on the device, one reference kept for the group. The blocks moved."""
        if not self.can_swap_out(seq):
            raise MemoryError(f"request {seq.id}: the host pool cannot hold its blocks")
        tables = self.block_tables.pop(seq.id)
        self._cached_tokens.pop(seq.id, None)
        kept = self._kept(seq, tables)
        if kept:
            self.swap_kept[seq.id] = tables[0][:kept]
            for block in tables[0][:kept]:
                self.pool.share(block)   # not a row: the split's repeats are the rows' and the cache's only
        self.cpu_tables[seq.id], moved = self._remap([t[kept:] for t in tables], kept, self.cpu_pool, "out",
                                                     lambda block, index: self.cpu_pool.share(block))
        self._drop_rows(seq, tables)
        return moved

    def can_swap_in(self, seq: Sequence, watermark: bool = True) -> bool:
        """Room for the group's host blocks and for its next decode step (its copies and new blocks, counted
        on the host tables, whose sharing the device tables keep), above the watermark unless told otherwise;
        unused cached prefixes count as room."""
        tables = self.cpu_tables[seq.id]
        step = self._group_needs(tables, seq.prompt_len + seq.generated, self.cpu_pool.ref_counts,
                                 len(self.swap_kept.get(seq.id, ())))
        need = len(self._distinct(tables)) + step
        return need + (self.watermark_blocks if watermark else 0) <= self.pool.num_free + self._evictable()

    def swap_in(self, seq: Sequence) -> int:
        """Bring a swapped group's host blocks back to the device pool, its rows sharing again the cached
        prefix blocks it kept; the blocks moved."""
        tables = self.cpu_tables.pop(seq.id)
        if not self._evict(len(self._distinct(tables)) - self.pool.num_free):
            raise MemoryError(f"request {seq.id}: the device pool cannot hold its blocks")
        kept = self.swap_kept.pop(seq.id, [])
        if kept:
            self._touch(seq.prefix_id)
        # Take device blocks first (device sharing is counted by _share), then free the host ones.
        new_tables, moved = self._remap(tables, len(kept), self.pool, "in",
                                        lambda block, index: self._share(block, index, seq))
        for row in new_tables:
            for index, block in enumerate(kept):
                self._share(block, index, seq)
            row[:0] = kept
        for block in kept:
            self.pool.release(block)     # the reference the group kept while swapped
        for table in tables:
            for block in table:
                self.cpu_pool.release(block)
        self.block_tables[seq.id] = new_tables
        self._add_rows(seq, new_tables)
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
            self._moves.append(("out", block, copy))
            self.pool.release(block)     # the reference the group kept while swapped
            for _ in rows[1:]:
                self.cpu_pool.share(copy)
        self.cpu_tables[seq.id] = [host + row for row in rows]
        return len(kept)

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
                    self._moves.append((kind, block, mapping[block]))
                row.append(mapping[block])
            out.append(row)
        return out, len(mapping)

    def drain_into(self, batch) -> None:
        """Hand the copy-on-write, swap-out and swap-in block pairs queued since the last call to `batch`."""
        if not self._moves:
            return
        moves, self._moves = self._moves, []
        batch.moves = moves
        batch.block_copies = [(a, b) for kind, a, b in moves if kind == "copy"]
        batch.copy_tokens = len(batch.block_copies) * self.block_size
        batch.swap_out = [(a, b) for kind, a, b in moves if kind == "out"]
        batch.swap_in = [(a, b) for kind, a, b in moves if kind == "in"]

    # -- what the executor and the summaries read ---------------------------------------------------

    def slots(self, seq: Sequence, start: int, end: int, row: int = 0) -> list[int]:
        """Flat cache slots (block * block_size + offset) of positions start..end-1 of a row of `seq`."""
        table, bs = self.block_tables[seq.id][row], self.block_size
        return [table[p // bs] * bs + p % bs for p in range(start, end)]

    def table(self, seq: Sequence, row: int = 0) -> list[int]:
        return self.block_tables[seq.id][row]

    def holds(self, seq: Sequence) -> bool:
        return seq.id in self.block_tables

    def usage(self) -> tuple[int, int]:
        """(slots the row tables would take without sharing, slots allocated to the held groups): the memory
        saving's terms. A cached prefix block some row maps counts once as allocated (that is the sharing);
        one the cache alone keeps (no request of that prefix is held) counts on neither side: it is neither
        shared nor needed, and a cache of many idle prefixes would otherwise read as a negative saving."""
        allocated = self.pool.num_blocks - self.pool.num_free
        if self.prefix_blocks:
            allocated -= self._evictable()
        return self._logical_slots, allocated * self.block_size

    def split(self, held, next_waiting: Sequence | None, stored: int | None = None) -> MemorySplit:
        """The split with `held` the groups holding blocks; `stored`, if the caller keeps it, the tokens
        their rows hold (a shared block's tokens counted once per row: the split removes the repeats)."""
        bs = self.block_size
        if len(held) != len(self.block_tables):
            raise ValueError(f"split of {len(held)} sequences; the manager holds {len(self.block_tables)}")
        if stored is None:
            stored = sum(s.width * (s.prompt_len + s.generated) for s in held)
        allocated = (self.pool.num_blocks - self.pool.num_free) * bs
        physical = stored + self._prefix_slots - self._dup_stored - (self._pending() if self._wide else 0)
        will_fill = self._will_fill + self._prefix_slots - self._dup_will
        # Any free block serves any request: no free block is too small or out of place.
        return split_totals(self.capacity, physical, will_fill, allocated, allocated,
                            self.pool.num_free * bs, 0)
