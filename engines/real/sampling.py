"""A request's own sampling, as an OpenAI request sets it: temperature, top-p, top-k and a seed.

`Sampling` is what the server hands the real executor for one request (`RealExecutor.request_sampling`, by
request id); `sample` draws that request's next token from one row of logits. Temperature 0 is the argmax.
Otherwise the logits are divided by the temperature, cut to the `top_k` most likely tokens and to the smallest
set whose probability reaches `top_p`, and one token is drawn with a generator seeded by the request's `seed`
(else by the executor's seed and the request id), the row and the step: the same seed gives the same tokens
whatever else shares the batch. Row r of a request of n parallel samples draws with r in that seed, so its rows
differ and a seeded request of n samples gives the same n every time (row 0 is what n=1 gives); at temperature 0
every row is the argmax. `logprobs` asks the executor for each chosen token's log-probability and the `logprobs`
most likely tokens' (engines/real/logprobs.py); None computes none.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class Sampling:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0                 # 0 (or -1): every token
    seed: int | None = None
    logprobs: int | None = None    # the most likely tokens each step reports beside the chosen one; None: none

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < -1:
            raise ValueError(f"top_k must be -1, 0 or a positive count, got {self.top_k}")
        if self.logprobs is not None and self.logprobs < 0:
            raise ValueError(f"logprobs must be None or >= 0, got {self.logprobs}")

    @property
    def greedy(self) -> bool:
        return self.temperature < 1e-5

    @property
    def argmax_only(self) -> bool:
        """Greedy with no log-probabilities: the step's argmax is all it needs (the static decode path)."""
        return self.temperature < 1e-5 and self.logprobs is None


def sample(logits: torch.Tensor, s: Sampling, request_id: int, row: int, step: int, default_seed: int = 0) -> int:
    """One token from `logits` [vocab] under `s`, drawn with (s.seed, row, step) as its seed when the request set
    one (two requests with one seed draw alike), else (default_seed, request_id, row, step)."""
    if s.greedy:
        return int(torch.argmax(logits))
    scores = logits.float() / s.temperature
    if s.top_k > 0 and s.top_k < scores.numel():
        kth = torch.topk(scores, s.top_k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if s.top_p < 1:
        ordered, index = torch.sort(scores, descending=True)
        probs = torch.softmax(ordered, dim=-1)
        before = torch.cumsum(probs, dim=-1) - probs        # mass of the tokens ranked above each one
        ordered = ordered.masked_fill(before >= s.top_p, float("-inf"))   # the first token always stays
        scores = torch.full_like(scores, float("-inf")).scatter(0, index, ordered)
    key = (s.seed, row, step) if s.seed is not None else (default_seed, request_id, row, step)
    seed = hash(key) & (2**63 - 1)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    probs = torch.softmax(scores, dim=-1).cpu()
    return int(torch.multinomial(probs, 1, generator=generator))
