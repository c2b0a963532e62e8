"""alpaca_synthetic: a SYNTHETIC stand-in for Alpaca when no alpaca_data.json is given.

No package reachable offline ships the Alpaca data, so with `path=None` the
alpaca workload draws a pool of pairs instead of reading text. It is labelled
"alpaca_synthetic" in logs and stats so no result is mistaken for real Alpaca.

Lengths are lognormal and random token ids are uniform in [0, 50257). The
targets are the means in the vLLM paper's Figure 11 for Alpaca after
filtering: 19.31 prompt tokens and 58.45 output tokens. The pool then goes
through the same length filters as a real dataset, and since the min_len
filter drops short draws (raising the mean), each lognormal's location is
solved so the mean of the lengths that *pass* `min_len` hits the target.

The paper gives means and histograms, not spreads, so the sigmas (of the
underlying normal) are a judgment call:
- prompt sigma 0.6 (coefficient of variation ~0.66): instructions are a
  sentence or two, with an occasional input paragraph; p50 ~16, p99 ~65.
- output sigma 1.0 (CV ~1.3): answers range from a short phrase to an essay
  of a few hundred tokens; p50 ~36, p99 ~360.
The upper filters (1024 prompt, 2048 total) drop essentially nothing here.
"""
from __future__ import annotations

import logging
import math

import numpy as np

from pagedbench.workloads.length_dist import LengthDist
from pagedbench.workloads.pairs import TokenizedPairs
from pagedbench.workloads.synthetic import synthetic_pairs

log = logging.getLogger("workloads")

LABEL = "alpaca_synthetic"
POOL_SIZE = 52_002  # records in the real alpaca_data.json
PROMPT_MEAN, PROMPT_SIGMA = 19.31, 0.6
OUTPUT_MEAN, OUTPUT_SIGMA = 58.45, 1.0


def synthetic_alpaca_pairs(min_len: int, rng: np.random.Generator) -> TokenizedPairs:
    """A pool of POOL_SIZE synthetic pairs whose lengths, once those under
    `min_len` are dropped, have the Figure 11 Alpaca means."""
    prompt_dist = _dist(PROMPT_MEAN, PROMPT_SIGMA, min_len)
    output_dist = _dist(OUTPUT_MEAN, OUTPUT_SIGMA, min_len)
    log.info("%s: drawing %d synthetic pairs (not real Alpaca text)", LABEL, POOL_SIZE)
    return synthetic_pairs(POOL_SIZE, prompt_dist, output_dist, rng)


def _dist(target: float, sigma: float, min_len: int) -> LengthDist:
    # A draw x rounds to a length >= min_len exactly when x >= min_len - 0.5.
    mu = lognormal_mu_for_truncated_mean(target, sigma, min_len - 0.5)
    return LengthDist(kind="lognormal", mean=math.exp(mu + sigma * sigma / 2), sigma=sigma)


def lognormal_mu_for_truncated_mean(target: float, sigma: float, threshold: float) -> float:
    """The mu with E[X | X >= threshold] = target for X = exp(N(mu, sigma^2)).

    That mean is exp(mu + sigma^2/2) * Phi(d + sigma) / Phi(d) with
    d = (mu - ln threshold) / sigma; it rises with mu, so bisect.
    """
    if not target > threshold:
        raise ValueError(f"target mean {target} must exceed the threshold {threshold}")
    log_a = math.log(threshold)

    def truncated_mean(mu: float) -> float:
        d = (mu - log_a) / sigma
        return math.exp(mu + sigma * sigma / 2) * _normal_cdf(d + sigma) / _normal_cdf(d)

    lo, hi = log_a - 8 * sigma, math.log(target)
    for _ in range(100):
        mid = (lo + hi) / 2
        if truncated_mean(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _normal_cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2))
