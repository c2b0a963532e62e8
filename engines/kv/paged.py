"""KV memory for the paged engine (vLLM's): block tables over a block pool, with a host swap pool.

The manager the scheduler talks to (`pagedbench.engines.protocols.KVManager`), put
together from one part per job:

- `block_pool.BlockPool`: reference counts, the free queue, the cached
  prefix blocks and their lazy eviction;
- `block_tables.BlockTables` (this class's base): a table per row,
  admission, growth with copy-on-write, beam forks, the prefix cache's use,
  and the queue of block moves for the next iteration;
- `host_swap.HostSwap`: a preempted group's blocks to the host pool and back;
- `split_ledger.SplitLedger`: the memory split, fed by every share and release.

The memory split counts physical slots: a block shared by several tables
is counted once. `usage()` gives the slots the tables would need without
any sharing beside the slots allocated: the paper's memory saving.
"""
from __future__ import annotations

from pagedbench.engines.kv.block_pool import blocks_for
from pagedbench.engines.kv.block_tables import BlockTables
from pagedbench.engines.kv.host_swap import HostSwap
from pagedbench.engines.kv.memory_split import MemorySplit
from pagedbench.engines.sequence import Sequence


class PagedKV(BlockTables):
    paged = True   # block tables; a sequence that cannot grow is preempted (recomputed or swapped)

    def __init__(self, capacity: int, block_size: int, watermark: float = 0.01, num_cpu_blocks: int = 0):
        super().__init__(capacity, block_size, watermark)
        self.swap = HostSwap(self, num_cpu_blocks)
        self.cpu_pool = self.swap.cpu_pool
        self.cpu_tables = self.swap.cpu_tables
        self.swap_kept = self.swap.swap_kept
        self.prefix_blocks = self.pool.cached      # prefix id -> its cached (full) blocks, LRU first
        self.can_swap_out = self.swap.can_swap_out
        self.swap_out = self.swap.swap_out
        self.can_swap_in = self.swap.can_swap_in
        self.swap_in = self.swap.swap_in
        self.spill_kept = self.swap.spill_kept
        self.drop_swapped = self.swap.drop_swapped

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

    def drain_into(self, batch) -> None:
        """Hand the copy-on-write, swap-out and swap-in block pairs queued since the last call to `batch`."""
        if not self.moves:
            return
        moves, self.moves = self.moves, []
        batch.moves = moves
        batch.block_copies = [(a, b) for kind, a, b in moves if kind == "copy"]
        batch.copy_tokens = len(batch.block_copies) * self.block_size
        batch.swap_out = [(a, b) for kind, a, b in moves if kind == "out"]
        batch.swap_in = [(a, b) for kind, a, b in moves if kind == "in"]

    def usage(self) -> tuple[int, int]:
        """(slots the row tables would take without sharing, slots allocated to the held groups): the memory
        saving's terms. A cached prefix block some row maps counts once as allocated (that is the sharing);
        one the cache alone keeps (no request of that prefix is held) counts on neither side: it is neither
        shared nor needed, and a cache of many idle prefixes would otherwise read as a negative saving."""
        pool = self.pool
        allocated = pool.num_blocks - pool.num_free
        if pool.cached:
            allocated -= pool.num_evictable
        return self.ledger.logical_slots, allocated * self.block_size

    def split(self, held, next_waiting: Sequence | None, stored: int | None = None) -> MemorySplit:
        """The split with `held` the groups holding blocks; `stored`, if the caller keeps it, the tokens
        their rows hold (a shared block's tokens counted once per row: the split removes the repeats)."""
        if len(held) != len(self.block_tables):
            raise ValueError(f"split of {len(held)} sequences; the manager holds {len(self.block_tables)}")
        if stored is None:
            stored = sum(s.width * (s.prompt_len + s.generated) for s in held)
        return self.ledger.split(self.pool, self.block_tables, stored)
