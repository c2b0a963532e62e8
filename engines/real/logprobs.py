"""The log-probabilities a request asks for: each chosen token's, and the most likely tokens', from the logits.

As vLLM's default (`logprobs_mode="raw_logprobs"`), a token's log-probability is the log-softmax of the raw logits
it was drawn from, before temperature, top-k and top-p: what the model says of the token, whatever the request's
sampling (a greedy token's is the top one's). `token_logprobs` computes them for the rows of one step that ask, at
once (one log-softmax and one top-k over those rows); a step where no request asks computes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class TokenLogprobs:
    """One chosen token's log-probability and the `k` most likely tokens' (id, log-probability), most likely
    first."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def token_logprobs(logits: torch.Tensor,   # [rows, vocab]
                   rows: list[int], tokens: list[int], top: list[int]) -> list[TokenLogprobs]:
    """For each i: the token `tokens[i]` chosen from `logits[rows[i]]`, with its `top[i]` most likely tokens."""
    logprobs = torch.log_softmax(logits[rows].float(), dim=-1)                # [len(rows), vocab]
    chosen = logprobs.gather(1, torch.tensor(tokens, device=logprobs.device)[:, None])[:, 0].tolist()
    k = max(top)
    if k == 0:
        return [TokenLogprobs(t, lp) for t, lp in zip(tokens, chosen)]
    values, ids = torch.topk(logprobs, k, dim=-1)                               # [len(rows), k] each
    values, ids = values.tolist(), ids.tolist()
    return [TokenLogprobs(t, lp, tuple(zip(ids[i][:top[i]], values[i][:top[i]])))
            for i, (t, lp) in enumerate(zip(tokens, chosen))]
