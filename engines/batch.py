"""What one iteration runs: which sequences advance, and what the executor must compute."""
from __future__ import annotations

from dataclasses import dataclass, field

from engines.sequence import Sequence


@dataclass(slots=True)
class Batch:
    """One iteration.

    `prefill` sequences process `prefill_lens` new tokens each (their prompt,
    plus earlier output after a recompute; padded for the static engine) and
    produce their first token. `decode` sequences produce one token each.
    `decode_context_lens` has one entry per row the executor computes: the
    context that row's query attends over: the `decode` rows, then the
    `padding` rows of finished requests that stay in the batch (static
    batching), which cost compute but produce nothing.
    """

    prefill: list[Sequence] = field(default_factory=list)
    prefill_lens: list[int] = field(default_factory=list)
    decode: list[Sequence] = field(default_factory=list)
    decode_context_lens: list[int] = field(default_factory=list)
    padding: list[Sequence] = field(default_factory=list)   # finished requests computed as padding rows
    preempted: int = 0

    @property
    def is_prefill(self) -> bool:
        return bool(self.prefill)

    @property
    def num_seqs(self) -> int:
        """Live sequences advancing this iteration (padding rows excluded)."""
        return len(self.prefill) + len(self.decode)

    @property
    def num_tokens(self) -> int:
        """Tokens the executor computes: prefill tokens plus one per decode row."""
        return sum(self.prefill_lens) + len(self.decode_context_lens)

    def advancing(self) -> list[Sequence]:
        return self.prefill + self.decode
