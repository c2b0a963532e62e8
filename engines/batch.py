"""What one iteration runs: which sequences advance, and what the executor must compute."""
from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter

from pagedbench.engines.sequence import Sequence

# The limits that can stop the head of the waiting queue from joining a batch: the KV manager refusing it,
# the cap on running sequences, the prefill's token budget. A scheduler may record other reasons
# ("batch_running": a static batch admits nobody until it ends; "swapped_first": swapped groups come back
# before any new request), which are no limit and count in none of the summary's fractions.
ADMISSION_LIMITS = ("memory", "max_num_seqs", "token_budget")
_width = attrgetter("width")


@dataclass(slots=True)
class Batch:
    """One iteration.

    `prefill` groups process `prefill_lens` new tokens each (their prompt,
    plus earlier output after a recompute; padded for the static engine) and
    produce their first token on every row. The first `prefill_cached` of
    those tokens are already in the cache (a shared prefix): only the rest is
    computed, attending over the cached ones. `decode` groups produce one
    token per row. `decode_context_lens` has one entry per row the executor
    computes: each decode group's `width` rows, then the `padding` rows of
    finished requests that stay in the batch (static batching), which cost
    compute but produce nothing.

    Before the forward pass the executor moves KV data the KV manager asked
    for: `block_copies` (paged copy-on-write, source -> destination block),
    `region_copies` (contiguous engines handing a beam's history to another
    row: source start, destination start, tokens), `swap_out` (device block
    -> host block) and `swap_in` (host block -> device block). `copy_tokens`
    counts the token slots the two copy lists move, for the cost model.
    `moves` lists the paged engine's block moves in the order they must run:
    a block one move frees may be the destination of the next.

    `admission_blocked_by` is why the scheduler, deciding this batch, left the
    head of the waiting queue out: one of `ADMISSION_LIMITS` or another
    reason; "" when nothing waited or everything waiting was admitted.
    """

    prefill: list[Sequence] = field(default_factory=list)
    prefill_lens: list[int] = field(default_factory=list)
    prefill_cached: list[int] = field(default_factory=list)   # per prefill group; empty means none cached
    decode: list[Sequence] = field(default_factory=list)
    decode_context_lens: list[int] = field(default_factory=list)
    padding: list[Sequence] = field(default_factory=list)   # finished requests computed as padding rows
    preempted: int = 0
    swapped_out: int = 0          # of the preempted groups, those swapped out (the rest are recomputed)
    swapped_in: int = 0
    block_copies: list[tuple[int, int]] = field(default_factory=list)
    region_copies: list[tuple[int, int, int]] = field(default_factory=list)
    copy_tokens: int = 0
    swap_out: list[tuple[int, int]] = field(default_factory=list)
    swap_in: list[tuple[int, int]] = field(default_factory=list)
    # The paged engine's block moves in the order it decided them: ("copy" | "out" | "in", source, destination).
    moves: list[tuple[str, int, int]] = field(default_factory=list)
    admission_blocked_by: str = ""
    # Set by a scheduler that knows it: every decode group is one row (no sample or beam group), so no decode
    # group forks or draws beams and the loops over them for that can be skipped. False: look at each.
    single_rows: bool = False

    @property
    def is_prefill(self) -> bool:
        return bool(self.prefill)

    @property
    def num_seqs(self) -> int:
        """Live requests (sequence groups) advancing this iteration (padding rows excluded)."""
        return len(self.prefill) + len(self.decode)

    @property
    def num_rows(self) -> int:
        """Live sequences advancing: one per row of every advancing group; each stores one new token."""
        return sum(map(_width, self.prefill)) + sum(map(_width, self.decode))

    @property
    def num_tokens(self) -> int:
        """Tokens the executor computes: new prefill tokens plus one per decode row."""
        return sum(self.prefill_lens) - sum(self.prefill_cached) + len(self.decode_context_lens)

    @property
    def computed_prefill_lens(self) -> list[int]:
        """The prefill tokens each group actually computes (those past its cached prefix)."""
        if not self.prefill_cached:
            return self.prefill_lens
        return [n - c for n, c in zip(self.prefill_lens, self.prefill_cached)]

    def advancing(self) -> list[Sequence]:
        return self.prefill + self.decode
