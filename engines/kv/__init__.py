"""KV memory: how an engine reserves, grows and frees token slots, and how the budget splits.

Allocators (`buddy`, `first_fit`) behind a `ContiguousArena` (`arena`), the
fixed-size `BlockPool` (`block_pool`), the reservation policies of the
contiguous engines (`reservation`), the two KV managers every scheduler
talks to (`contiguous.ContiguousKV`: a region per sequence;
`paged.PagedKV`, put together from one part per job: `block_pool`
(reference counts, the free queue with the cached prefix blocks, lazy
eviction), `block_tables` (a table per row, copy-on-write, forks, the move
queue), `host_swap` (the host pool for swapping) and `split_ledger` (the
split's running sums, fed by share and release events)), the paper's split of
capacity into token states, reservation, fragmentation and free
(`memory_split`), and the byte budget a device leaves for the cache
(`budget`). Pure Python, no torch. May import `pagedbench.engines.sequence` and
`pagedbench.engines.specs`; never the schedulers, the loop or a backend.
"""
