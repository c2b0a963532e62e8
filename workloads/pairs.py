"""Tokenized (prompt, completion) pairs of a dataset, stored as flat arrays.

A dataset's pairs are kept as one int32 array of every prompt's token ids
back to back, an offsets array (prompt i is ids[offsets[i]:offsets[i+1]]),
and the completion lengths. That is what the disk cache holds and what the
filters read, without building a Python tuple per prompt until a request is
actually made.

A generated pool may also say which prompts start with a shared prefix
(`prefix_ids`, `prefix_lens`); the dataset loaders and the cache have none.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Texts handed to the tokenizer at once: large enough for its threads, small
# enough that the lists of ids stay a modest multiple of the text in memory.
TOKENIZE_CHUNK = 4096


class TokenIds(Sequence):
    """One prompt's token ids as an immutable sequence of ints, held as a read-only int32 view of the pool's
    array: 4 bytes a token, where a tuple of Python ints takes ~36 (a one-hour ShareGPT trace's prompts took
    115 MiB as tuples). Compares and hashes as the tuple of its ids; iterating or indexing gives Python ints."""

    __slots__ = ("_ids",)

    def __init__(self, ids) -> None:
        view = np.array(ids, dtype=np.int32) if not isinstance(ids, np.ndarray) else ids.astype(np.int32, copy=False)
        if view.ndim != 1:
            raise ValueError(f"token ids must be one-dimensional, got shape {view.shape}")
        view = view.view()
        view.flags.writeable = False
        self._ids = view

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return TokenIds(self._ids[i])
        return int(self._ids[i])

    def __iter__(self):
        return iter(self._ids.tolist())

    def __array__(self, dtype=None, copy=None):
        return self._ids if dtype is None else self._ids.astype(dtype)

    def __eq__(self, other) -> bool:
        if isinstance(other, TokenIds):
            return np.array_equal(self._ids, other._ids)
        if isinstance(other, tuple):
            return len(other) == len(self._ids) and self._ids.tolist() == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self._ids.tolist()))

    def __repr__(self) -> str:
        return f"TokenIds({self._ids.tolist()!r})"


@dataclass(slots=True)
class TokenizedPairs:
    prompt_ids: np.ndarray  # [total prompt tokens] int32
    prompt_offsets: np.ndarray  # [num_pairs + 1] int64, starts at 0
    output_lens: np.ndarray  # [num_pairs] int32
    prefix_ids: np.ndarray | None = None   # [num_pairs] int64, -1 where the prompt has no shared prefix
    prefix_lens: np.ndarray | None = None  # [num_pairs] int64, 0 where it has none

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
        if (self.prefix_ids is None) != (self.prefix_lens is None):
            raise ValueError("prefix_ids and prefix_lens go together: give both or neither")
        if self.prefix_ids is not None:
            if self.prefix_ids.shape != self.output_lens.shape or self.prefix_lens.shape != self.output_lens.shape:
                raise ValueError(f"prefix_ids and prefix_lens need one entry per pair ({len(self.output_lens)})")
            if np.any(self.prefix_lens < 0) or np.any((self.prefix_ids >= 0) != (self.prefix_lens > 0)):
                raise ValueError("a pair with a prefix_id >= 0 needs a prefix_len > 0, one without needs 0")
            if np.any(self.prefix_lens >= np.maximum(self.prompt_lens, 1)):
                raise ValueError("a shared prefix must be shorter than its prompt")

    def __len__(self) -> int:
        return len(self.output_lens)

    @property
    def prompt_lens(self) -> np.ndarray:
        return np.diff(self.prompt_offsets)

    def prompt(self, i: int) -> TokenIds:
        """Prompt i's ids: a view of `prompt_ids`, no copy."""
        start, end = self.prompt_offsets[i], self.prompt_offsets[i + 1]
        return TokenIds(self.prompt_ids[start:end])

    def prefix(self, i: int) -> tuple[int | None, int]:
        """(prefix_id, prefix_len) of pair i: (None, 0) when its prompt has no shared prefix."""
        if self.prefix_ids is None or self.prefix_ids[i] < 0:
            return None, 0
        return int(self.prefix_ids[i]), int(self.prefix_lens[i])

    @classmethod
    def from_lists(cls, prompts: list[list[int]], output_lens: list[int]) -> TokenizedPairs:
        lens = np.fromiter((len(p) for p in prompts), dtype=np.int64, count=len(prompts))
        offsets = np.zeros(len(prompts) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        ids = np.fromiter((t for p in prompts for t in p), dtype=np.int32, count=int(offsets[-1]))
        return cls(ids, offsets, np.asarray(output_lens, dtype=np.int32).reshape(-1))


def tokenize_pairs(pairs: list[tuple[str, str]], tokenizer) -> TokenizedPairs:
    """Prompt token ids and completion token counts for every pair, in order.

    Each chunk's ids become an int32 array at once: Python lists of ids take
    ~36 bytes a token, and the chat workload's histories run to tens of
    millions of tokens."""
    chunks: list[TokenizedPairs] = []
    for start in range(0, len(pairs), TOKENIZE_CHUNK):
        chunk = pairs[start:start + TOKENIZE_CHUNK]
        prompts = tokenizer.encode_batch([p for p, _ in chunk])
        output_lens = [len(ids) for ids in tokenizer.encode_batch([c for _, c in chunk])]
        chunks.append(TokenizedPairs.from_lists(prompts, output_lens))
    return concat_pairs(chunks)


def concat_pairs(parts: list[TokenizedPairs]) -> TokenizedPairs:
    """The pairs of `parts` back to back (without prefixes: only the loaders use it)."""
    if not parts:
        return TokenizedPairs.from_lists([], [])
    lens = np.concatenate([p.prompt_lens for p in parts])
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    return TokenizedPairs(np.concatenate([p.prompt_ids for p in parts]).astype(np.int32, copy=False), offsets,
                          np.concatenate([p.output_lens for p in parts]).astype(np.int32, copy=False))
