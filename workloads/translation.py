"""translation: a GENERATED stand-in for WMT16 en-de with a shared few-shot prefix (the paper's Figure 16).

The paper serves LLaMA-13B on WMT16 English-to-German with a few-shot
prompt shared by every request: a 1-shot prefix of 80 tokens and a 5-shot
prefix of 341 tokens. No copy of WMT16 can be downloaded here, so this
workload generates requests from stated statistics instead of reading the
data; it is a length model, not the test set.

- Prefix: `num_shots` examples. 1 shot -> 80 tokens and 5 shots -> 341
  tokens (the paper's); other counts are linear in the shots through those
  two points, 80 + (num_shots - 1) * 65.25 tokens rounded (beyond 5 shots
  an extrapolation); 0 shots -> no prefix. With `num_prefixes` > 1 there are
  that many different prefixes of that length and each request picks one
  uniformly. A prefix's token ids depend only on (seed, prefix index).
- Source sentence: WMT16 en-de newstest sentences average about 25-30
  subword tokens (an approximation, not measured here: news sentences
  average a little over 20 words, and a subword tokenizer such as LLaMA's
  splits some words into several tokens); drawn lognormal with mean 28
  and standard deviation 15 tokens, rounded and clipped to [4, 256]. Each request's own part of the prompt is the
  sentence plus `FRAMING_TOKENS` for its "English: ... German:" template.
- Target (the output): German runs slightly longer than English; the
  target length is the source length times a lognormal ratio with mean 1.1
  and standard deviation 0.2, rounded and clipped to >= 4 tokens.

Token ids are uniform in the synthetic vocabulary, as everywhere else; the
prompt is the prefix's ids followed by the request's own.
"""
from __future__ import annotations

import math

import numpy as np

from pagedbench.workloads.length_dist import lognormal_lengths
from pagedbench.workloads.pairs import TokenizedPairs
from pagedbench.workloads.synthetic import VOCAB_SIZE, shared_prefix_ids

PREFIX_LEN_1_SHOT, PREFIX_LEN_5_SHOT = 80, 341   # the paper's Figure 16
TOKENS_PER_SHOT = (PREFIX_LEN_5_SHOT - PREFIX_LEN_1_SHOT) / 4
SOURCE_MEAN, SOURCE_SD = 28.0, 15.0
SOURCE_MIN, SOURCE_MAX = 4, 256
RATIO_MEAN, RATIO_SD = 1.1, 0.2   # target / source length
TARGET_MIN = 4
FRAMING_TOKENS = 6   # "\n\nEnglish: " before the sentence and "\nGerman:" after it


def prefix_len_for_shots(num_shots: int) -> int:
    """Tokens of a `num_shots`-shot prefix: 0, 80, 145, 211, 276, 341, ...
    (linear through the paper's 80 at 1 shot and 341 at 5 shots)."""
    if num_shots < 0:
        raise ValueError(f"num_shots must be >= 0, got {num_shots}")
    if num_shots == 0:
        return 0
    return int(math.floor(PREFIX_LEN_1_SHOT + (num_shots - 1) * TOKENS_PER_SHOT + 0.5))


def translation_pairs(n: int, num_shots: int, num_prefixes: int, seed: int,
                      rng: np.random.Generator) -> TokenizedPairs:
    """Exactly `n` pairs: source lengths, length ratios, prefix picks, then
    the requests' own token ids, all from `rng` in that order; the prefixes'
    ids from `seed` alone. Prompts are prefix + framing + source."""
    source = np.clip(lognormal_lengths(n, SOURCE_MEAN, _sigma(SOURCE_MEAN, SOURCE_SD), rng), SOURCE_MIN, SOURCE_MAX)
    ratio = rng.lognormal(_mu(RATIO_MEAN, RATIO_SD), _sigma(RATIO_MEAN, RATIO_SD), size=n)
    target = np.maximum(np.rint(source * ratio), TARGET_MIN).astype(np.int32)
    prefix_len = prefix_len_for_shots(num_shots)
    picks = rng.integers(0, num_prefixes, size=n) if prefix_len else np.full(n, -1, dtype=np.int64)
    own_lens = FRAMING_TOKENS + source
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(own_lens + prefix_len, out=offsets[1:])
    ids = np.empty(int(offsets[-1]), dtype=np.int32)
    in_prefix = np.zeros(len(ids), dtype=bool)
    if prefix_len:
        prefixes = np.stack([shared_prefix_ids(seed, k, prefix_len) for k in range(num_prefixes)])
        positions = offsets[:-1, None] + np.arange(prefix_len)   # [n, prefix_len]
        ids[positions] = prefixes[picks]
        in_prefix[positions] = True
    ids[~in_prefix] = rng.integers(0, VOCAB_SIZE, size=int(own_lens.sum()), dtype=np.int32)
    return TokenizedPairs(ids, offsets, target, prefix_ids=picks.astype(np.int64),
                          prefix_lens=np.where(picks >= 0, prefix_len, 0).astype(np.int64))


def _sigma(mean: float, sd: float) -> float:
    """The underlying normal's sigma of a lognormal with this arithmetic mean and standard deviation."""
    return math.sqrt(math.log1p((sd / mean) ** 2))


def _mu(mean: float, sd: float) -> float:
    return math.log(mean) - _sigma(mean, sd) ** 2 / 2
