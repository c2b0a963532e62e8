"""Block tables: one table of physical blocks per row of a group, sharing blocks by reference count.

Every row of a request (its parallel samples or beams) has its own block
table; tables share physical blocks of the `BlockPool`:

- a group's rows share its prompt's blocks from admission (the prompt is
  prefilled once);
- a beam step re-forms the rows (`fork`): each new row takes its parent's
  table, sharing every block, and the rows no beam descends from are freed;
- a row about to write into a shared block gets its own copy first
  (copy-on-write, in `grow_all`); the copy is queued in `moves` for the
  next iteration's executor, which charges or performs it;
- requests with the same shared prefix (`prefix_id`) map their first blocks
  to the prefix's blocks, computed by the first such request and then
  cached by the pool (full blocks only: a partial block would be written).
  The pool evicts a cached prefix no group holds when an allocation needs
  its blocks; the next request of that prefix computes and caches it again.

Every share, release and growth is reported to the `SplitLedger`, which
keeps the memory split without walking the tables.
"""
from __future__ import annotations

from pagedbench.engines.kv.block_pool import BlockPool, blocks_for
from pagedbench.engines.kv.split_ledger import SplitLedger
from pagedbench.engines.sequence import Sequence


class BlockTables:
    def __init__(self, capacity: int, block_size: int, watermark: float):
        self.capacity = capacity
        self.block_size = block_size
        self.pool = BlockPool(capacity // block_size, block_size)
        # Admission leaves this many blocks free for running sequences to grow into (vLLM's watermark).
        self.watermark_blocks = int(watermark * self.pool.num_blocks)
        self.ledger = SplitLedger(capacity, block_size)
        self.block_tables: dict[int, list[list[int]]] = {}   # request id -> one table per row
        self._cached_tokens: dict[int, int] = {}             # request id -> prefix tokens found in the cache
        # Request id -> the `generated` count from which a group's decode step needs something: for a single row,
        # when its table is full (its slots less its prompt), kept by put, take and _append_block, the only
        # changes to a single row's length. For a group of several rows: -1 (always looked at) until grow_all
        # has readied it, then when its shortest table is full, as each row's write block is its own from then
        # on (a copy or a new block; only a fork shares a block a group writes into: fork and put reset it).
        self._full_at: dict[int, int] = {}
        # Block moves for the next iteration ("copy" on write, swap "out", swap "in": source, destination) in
        # the order they were decided: a block freed by one may be the destination of a later one.
        self.moves: list[tuple[str, int, int]] = []

    def share(self, block: int, index: int, seq: Sequence) -> None:
        """One more reference to `block`, the index-th of a row of `seq`."""
        self.pool.share(block)
        self.ledger.shared(index, seq)

    def release(self, block: int, index: int, seq: Sequence) -> None:
        if self.pool.ref_counts[block] > 1:
            self.ledger.unshared(index, seq)
        self.pool.release(block)

    def put(self, seq: Sequence, tables: list[list[int]]) -> None:
        self.block_tables[seq.id] = tables
        self._full_at[seq.id] = len(tables[0]) * self.block_size - seq.prompt_len if len(tables) == 1 else -1
        self.ledger.rows_added(seq, tables)

    def take(self, seq: Sequence) -> list[list[int]]:
        """Remove a group's tables (their blocks still referenced: `drop_rows` releases them)."""
        self._cached_tokens.pop(seq.id, None)
        del self._full_at[seq.id]
        return self.block_tables.pop(seq.id)

    def drop_rows(self, seq: Sequence, tables: list[list[int]]) -> None:
        self.ledger.rows_dropped(seq, tables)
        for table in tables:
            for index, block in enumerate(table):
                self.release(block, index, seq)

    # -- admission, growth, release ------------------------------------------------------------------

    def try_admit(self, seq: Sequence) -> bool:
        """Allocate blocks for the tokens to prefill and the token the prefill produces; every row of the
        group shares them. A cached shared prefix supplies the first blocks."""
        if seq.width > 1 and seq.generated:
            raise RuntimeError(f"request {seq.id}: a group of {seq.width} sequences cannot be recomputed; "
                               f"it must be swapped")
        bs, pool = self.block_size, self.pool
        cached = pool.lookup(seq.prefix_id)
        shared = blocks_for(seq.length, bs) - len(cached)       # the prompt's blocks, which every row shares
        own = 1 if seq.length % bs == 0 else 0                  # the produced token starts a block: one per row
        if not pool.reserve(shared + own * seq.width + self.watermark_blocks, keep=seq.prefix_id):
            return False
        table = list(cached)
        for index, block in enumerate(cached):
            self.share(block, index, seq)
        table += [pool.allocate() for _ in range(shared)]
        tables = [table]
        for _ in range(seq.width - 1):
            tables.append(list(table))
            for index, block in enumerate(table):
                self.share(block, index, seq)
        if own:
            for row in tables:
                row.append(pool.allocate())
        self.put(seq, tables)
        if cached:
            self._cached_tokens[seq.id] = len(cached) * bs
        return True

    def cached_tokens(self, seq: Sequence) -> int:
        """Prompt tokens of an admitted request already in the cache (its shared prefix): not prefilled."""
        return self._cached_tokens.get(seq.id, 0)

    def prefilled(self, seq: Sequence) -> None:
        """After `seq`'s prefill: the first request of a shared prefix hands its full prefix blocks to the
        pool's cache, which keeps them for every later request of that prefix."""
        self._cached_tokens.pop(seq.id, None)
        if seq.prefix_id is None or seq.prefix_id in self.pool.cached:
            return
        full = seq.prefix_len // self.block_size
        if full == 0:
            return
        blocks = self.block_tables[seq.id][0][:full]
        for index in range(full):
            self.ledger.shared(index, seq)   # full blocks: the cache's reference repeats bs slots
        self.pool.cache(seq.prefix_id, blocks)

    def share_prompt(self, seq: Sequence) -> None:
        """After a group's prefill: nothing to do, its rows have shared the prompt's blocks since admission."""

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
        # The groups with something to do, found in one pass: a group of several rows, or a row whose table is
        # full (a single row with room needs nothing). Taking a block for one changes no other's test.
        full_at = self._full_at
        todo = [i for i in range(start, len(seqs)) if (seq := seqs[i]).generated >= full_at[seq.id]]
        for i in todo:
            seq = seqs[i]
            length = seq.prompt_len + seq.generated
            rows = tables[seq.id]
            if len(rows) == 1:                     # one row: no block of it at length - 1 is shared
                table = rows[0]
                if length < len(table) * bs:
                    continue
                if pool.num_free == 0 and pool.num_available == 0:
                    return i
                self._append_block(table, seq)
                continue
            # A group is readied whole or not at all: count what it needs before taking anything.
            if self.group_needs(rows, length) > pool.num_available:
                return i
            last = (length - 1) // bs
            for table in rows:
                block = table[last]
                if refs[block] > 1:
                    copy = pool.allocate()
                    self.moves.append(("copy", block, copy))
                    table[last] = copy
                    self.release(block, last, seq)
                if length >= len(table) * bs:
                    self._append_block(table, seq)
            full_at[seq.id] = min(map(len, rows)) * bs - seq.prompt_len
        return len(seqs)

    def growths(self, seqs: list[Sequence]) -> tuple[list[int], int]:
        """When single-row groups' next decode steps take a block: each at step offsets j0, j0 + period, ...
        from now (j0 = slots left in its table). (`pagedbench.engines.engine.Engine.fast_forward`)"""
        full_at = self._full_at
        return [full_at[s.id] - s.generated for s in seqs], self.block_size

    @property
    def available_blocks(self) -> int:
        """Blocks decode steps can still take without a preemption: free and evictable ones."""
        return self.pool.num_available

    def append_block(self, seq: Sequence) -> None:
        """A new block at the end of a single-row group's table, as its decode step's growth takes it."""
        self._append_block(self.block_tables[seq.id][0], seq)

    def _append_block(self, table: list[int], seq: Sequence) -> None:
        """A new block at the end of a row's table (the pool has one available)."""
        table.append(self.pool.allocate())
        if self._full_at[seq.id] >= 0:          # a single row: full one block later (grow_all sets a group's after
            self._full_at[seq.id] += self.block_size   # its rows, over what this adds)
        self.ledger.row_resized(seq, len(table) - 1, len(table))

    def group_needs(self, rows: list[list[int]], length: int, refs: list[int] | None = None,
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
        new = list(old)
        for row, parent, split in changes:
            src = old[parent]
            for index in range(split, len(src)):
                self.share(src[index], index, seq)
            new[row] = list(src)
        for row, parent, split in changes:
            dst, src = old[row], old[parent]
            for index in range(split, len(dst)):
                self.release(dst[index], index, seq)
            self.ledger.row_resized(seq, len(dst), len(src))
        self.block_tables[seq.id] = new
        self._full_at[seq.id] = -1

    def free(self, seq: Sequence) -> None:
        self.drop_rows(seq, self.take(seq))

    # -- what the executor reads ---------------------------------------------------------------------

    def slots(self, seq: Sequence, start: int, end: int, row: int = 0) -> list[int]:
        """Flat cache slots (block * block_size + offset) of positions start..end-1 of a row of `seq`."""
        table, bs = self.block_tables[seq.id][row], self.block_size
        return [table[p // bs] * bs + p % bs for p in range(start, end)]

    def table(self, seq: Sequence, row: int = 0) -> list[int]:
        return self.block_tables[seq.id][row]

    def holds(self, seq: Sequence) -> bool:
        return seq.id in self.block_tables
