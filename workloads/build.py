"""Config in, list of requests out: the one entry point that makes a trace."""
from __future__ import annotations

import logging

import numpy as np

from workloads.alpaca import load_alpaca
from workloads.alpaca_synthetic import synthetic_alpaca_pairs
from workloads.arrivals import arrival_times
from workloads.config import WorkloadConfig
from workloads.filters import passes_filters
from workloads.pairs import TokenizedPairs
from workloads.request import Request
from workloads.sharegpt import load_sharegpt
from workloads.synthetic import synthetic_pairs
from workloads.tokenizer import load_tokenizer

log = logging.getLogger("workloads")

# Independent random streams derived from cfg.seed: np.random.default_rng([seed, stream]).
# The shuffle uses default_rng(seed) itself.
PAIRS_STREAM = 1
ARRIVAL_STREAM = 2
ALPACA_POOL_SEED = 19_31_58_45


def build_workload(cfg: WorkloadConfig) -> list[Request]:
    """The trace `cfg` names; a pure function of `cfg` (and the dataset file).

    Dataset pairs that pass the length filters are shuffled with
    default_rng(seed) and the first `num_requests` taken; arrival times come
    from a separate stream, so changing the arrival process keeps the same
    requests. Ids are 0..n-1 in arrival order.
    """
    pairs = load_pairs(cfg)
    if cfg.name == "synthetic":
        kept = np.arange(len(pairs))
    else:
        mask = passes_filters(pairs.prompt_lens, pairs.output_lens, cfg.min_len, cfg.max_prompt_len,
                              cfg.max_total_len)
        kept = np.flatnonzero(mask)
        log.info("%s: %d of %d pairs pass the length filters (min %d, prompt <= %d, total <= %d)",
                 cfg.label, len(kept), len(pairs), cfg.min_len, cfg.max_prompt_len, cfg.max_total_len)
    if len(kept) < cfg.num_requests:
        raise ValueError(
            f"{cfg.label}: num_requests={cfg.num_requests} but only {len(kept)} pairs "
            f"pass the length filters"
        )
    chosen = np.random.default_rng(cfg.seed).permutation(kept)[: cfg.num_requests]
    times = arrival_times(cfg.num_requests, cfg.arrival, cfg.request_rate, cfg.burstiness,
                          np.random.default_rng([cfg.seed, ARRIVAL_STREAM]))
    return [
        Request(id=i, arrival_s=t, prompt_token_ids=pairs.prompt(int(j)), output_len=int(pairs.output_lens[j]))
        for i, (t, j) in enumerate(zip(times, chosen))
    ]


def load_pairs(cfg: WorkloadConfig) -> TokenizedPairs:
    """Every pair the config's source offers, before filtering and sampling."""
    if cfg.name == "sharegpt":
        return load_sharegpt(cfg.path, load_tokenizer(cfg.tokenizer))
    if cfg.name == "alpaca" and cfg.path is not None:
        return load_alpaca(cfg.path, load_tokenizer(cfg.tokenizer))
    if cfg.name == "alpaca":
        # A fixed pool, like a file: the seed picks from it, as for real data.
        return synthetic_alpaca_pairs(cfg.min_len, np.random.default_rng(ALPACA_POOL_SEED))
    rng = np.random.default_rng([cfg.seed, PAIRS_STREAM])
    return synthetic_pairs(cfg.num_requests, cfg.prompt_dist, cfg.output_dist, rng)
