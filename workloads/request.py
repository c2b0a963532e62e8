"""One request of a trace: what arrives, when, and how much it will generate."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(slots=True, frozen=True)
class Request:
    """A request as the engines see it.

    `output_len` is the true number of tokens this request generates (EOS is
    ignored, as in vLLM's throughput benchmark), per sequence.

    Sampling: `n` > 1 asks for n parallel samples of the same prompt,
    `beam_width` > 1 for beam search with that many beams; a request is one
    or the other, never both, and `width` is the number of sequences it runs.

    Shared prefix: when `prefix_id` is set, the first `prefix_len` tokens of
    `prompt_token_ids` are a prefix identical, token for token, in every
    request of the trace with the same `prefix_id` (a few-shot prompt, say),
    so an engine may keep its KV once and share it; the rest of the prompt
    is the request's own.
    """

    id: int
    arrival_s: float
    prompt_token_ids: Sequence[int] = field(repr=False)   # a tuple, or a pool's `TokenIds` (the same ids)
    output_len: int
    n: int = 1
    beam_width: int = 1
    prefix_id: int | None = None
    prefix_len: int = 0              # tokens at the start of the prompt shared by every request with this prefix_id
    pair_index: int | None = None   # which pair of the dataset's filtered pool it was drawn from

    def __post_init__(self) -> None:
        if len(self.prompt_token_ids) < 1:
            raise ValueError(f"request {self.id}: empty prompt")
        if self.output_len < 1:
            raise ValueError(f"request {self.id}: output_len must be >= 1, got {self.output_len}")
        if self.arrival_s < 0:
            raise ValueError(f"request {self.id}: arrival_s must be >= 0, got {self.arrival_s}")
        if self.n < 1 or self.beam_width < 1:
            raise ValueError(f"request {self.id}: n and beam_width must be >= 1, got n={self.n} "
                             f"beam_width={self.beam_width}")
        if self.n > 1 and self.beam_width > 1:
            raise ValueError(f"request {self.id}: a request is either parallel sampling (n > 1) or beam search "
                             f"(beam_width > 1), not both; got n={self.n} beam_width={self.beam_width}")
        if self.prefix_id is not None and self.prefix_id < 0:
            raise ValueError(f"request {self.id}: prefix_id must be None or >= 0, got {self.prefix_id}")
        if not 0 <= self.prefix_len < len(self.prompt_token_ids):
            raise ValueError(f"request {self.id}: prefix_len must be >= 0 and shorter than the prompt "
                             f"({len(self.prompt_token_ids)} tokens), got {self.prefix_len}")
        if (self.prefix_len > 0) != (self.prefix_id is not None):
            raise ValueError(f"request {self.id}: a shared prefix needs both a prefix_id and a prefix_len > 0, "
                             f"got prefix_id={self.prefix_id} prefix_len={self.prefix_len}")

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def total_len(self) -> int:
        """Prompt plus every generated token of one sequence: the KV slots it ends up holding with width 1."""
        return self.prompt_len + self.output_len

    @property
    def width(self) -> int:
        """Sequences the request runs: its n parallel samples or its beam_width beams (1 for neither)."""
        return max(self.n, self.beam_width)
