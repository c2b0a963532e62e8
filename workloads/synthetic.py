"""Synthetic pairs: lengths drawn from the config's distributions, random token ids; shared prefixes' ids."""
from __future__ import annotations

import numpy as np

from pagedbench.workloads.length_dist import LengthDist
from pagedbench.workloads.pairs import TokenizedPairs

VOCAB_SIZE = 50_257  # GPT-2 / OPT vocabulary; ids are uniform in [0, VOCAB_SIZE)
PREFIX_STREAM = 3    # np.random.default_rng([seed, PREFIX_STREAM, prefix_id]) makes a shared prefix


def synthetic_pairs(
    n: int, prompt_dist: LengthDist, output_dist: LengthDist, rng: np.random.Generator
) -> TokenizedPairs:
    """Exactly `n` pairs: prompt lengths, then output lengths, then token ids,
    all from `rng` in that order."""
    prompt_lens = prompt_dist.sample(n, rng)
    output_lens = output_dist.sample(n, rng)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(prompt_lens, out=offsets[1:])
    ids = rng.integers(0, VOCAB_SIZE, size=int(offsets[-1]), dtype=np.int32)
    return TokenizedPairs(ids, offsets, output_lens.astype(np.int32))


def shared_prefix_ids(seed: int, prefix_id: int, length: int) -> np.ndarray:
    """The token ids of shared prefix `prefix_id`: the same for a given (seed, prefix_id) wherever it is
    made, and the shorter prefix of a longer one's. Its own stream, apart from build.py's (1, 2)."""
    return np.random.default_rng([seed, PREFIX_STREAM, prefix_id]).integers(0, VOCAB_SIZE, size=length,
                                                                            dtype=np.int32)
