"""One request of a trace: what arrives, when, and how much it will generate."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True, frozen=True)
class Request:
    """A request as the engines see it.

    `output_len` is the true number of tokens this request generates (EOS is
    ignored, as in vLLM's throughput benchmark). The tags `n`, `beam_width`
    and `prefix_id` are carried for parallel sampling, beam search and shared
    prefixes; the engines of this release serve n = beam_width = 1.
    """

    id: int
    arrival_s: float
    prompt_token_ids: tuple[int, ...] = field(repr=False)
    output_len: int
    n: int = 1
    beam_width: int = 1
    prefix_id: int | None = None
    pair_index: int | None = None   # which pair of the dataset's filtered pool it was drawn from

    def __post_init__(self) -> None:
        if len(self.prompt_token_ids) < 1:
            raise ValueError(f"request {self.id}: empty prompt")
        if self.output_len < 1:
            raise ValueError(f"request {self.id}: output_len must be >= 1, got {self.output_len}")
        if self.arrival_s < 0:
            raise ValueError(f"request {self.id}: arrival_s must be >= 0, got {self.arrival_s}")
        if self.n < 1 or self.beam_width < 1:
            raise ValueError(f"request {self.id}: n and beam_width must be >= 1")

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def total_len(self) -> int:
        """Prompt plus every generated token: the KV slots the request ends up holding."""
        return self.prompt_len + self.output_len
