"""KV memory: how an engine reserves, grows and frees token slots, and how the budget splits.

Allocators (`buddy`, `first_fit`) behind a `ContiguousArena` (`arena`), the
fixed-size `BlockPool` (`block_pool`), the reservation policies of the
contiguous engines (`reservation`), the two KV managers every scheduler
talks to (`contiguous.ContiguousKV`: a region per sequence;
`paged.PagedKV`: reference-counted block tables, copy-on-write, a prefix
cache and a host pool for swapping), the paper's split of
capacity into token states, reservation, fragmentation and free
(`memory_split`), and the byte budget a device leaves for the cache
(`budget`). Pure Python, no torch. May import `engines.sequence` and
`engines.specs`; never the schedulers, the loop or a backend.
"""
