"""Tokenized (prompt, completion) pairs of a dataset, stored as flat arrays.

A dataset's pairs are kept as one int32 array of every prompt's token ids
back to back, an offsets array (prompt i is ids[offsets[i]:offsets[i+1]]),
and the completion lengths. That is what the disk cache holds and what the
filters read, without building a Python tuple per prompt until a request is
actually made.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Texts handed to the tokenizer at once: large enough for its threads, small
# enough that the lists of ids stay a modest multiple of the text in memory.
TOKENIZE_CHUNK = 4096


@dataclass(slots=True)
class TokenizedPairs:
    prompt_ids: np.ndarray  # [total prompt tokens] int32
    prompt_offsets: np.ndarray  # [num_pairs + 1] int64, starts at 0
    output_lens: np.ndarray  # [num_pairs] int32

    def __post_init__(self) -> None:
        if self.prompt_offsets.ndim != 1 or len(self.prompt_offsets) != len(self.output_lens) + 1:
            raise ValueError(
                f"prompt_offsets needs num_pairs + 1 = {len(self.output_lens) + 1} entries, "
                f"got shape {self.prompt_offsets.shape}"
            )
        if self.prompt_offsets[0] != 0 or self.prompt_offsets[-1] != len(self.prompt_ids):
            raise ValueError("prompt_offsets must start at 0 and end at len(prompt_ids)")
        if np.any(np.diff(self.prompt_offsets) < 0):
            raise ValueError("prompt_offsets must be non-decreasing")

    def __len__(self) -> int:
        return len(self.output_lens)

    @property
    def prompt_lens(self) -> np.ndarray:
        return np.diff(self.prompt_offsets)

    def prompt(self, i: int) -> tuple[int, ...]:
        start, end = self.prompt_offsets[i], self.prompt_offsets[i + 1]
        return tuple(self.prompt_ids[start:end].tolist())

    @classmethod
    def from_lists(cls, prompts: list[list[int]], output_lens: list[int]) -> TokenizedPairs:
        lens = np.fromiter((len(p) for p in prompts), dtype=np.int64, count=len(prompts))
        offsets = np.zeros(len(prompts) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        ids = np.fromiter((t for p in prompts for t in p), dtype=np.int32, count=int(offsets[-1]))
        return cls(ids, offsets, np.asarray(output_lens, dtype=np.int32).reshape(-1))


def tokenize_pairs(pairs: list[tuple[str, str]], tokenizer) -> TokenizedPairs:
    """Prompt token ids and completion token counts for every pair, in order."""
    prompts: list[list[int]] = []
    output_lens: list[int] = []
    for start in range(0, len(pairs), TOKENIZE_CHUNK):
        chunk = pairs[start:start + TOKENIZE_CHUNK]
        prompts.extend(tokenizer.encode_batch([p for p, _ in chunk]))
        output_lens.extend(len(ids) for ids in tokenizer.encode_batch([c for _, c in chunk]))
    return TokenizedPairs.from_lists(prompts, output_lens)
