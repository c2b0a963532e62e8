"""Config in, list of requests out: the one entry point that makes a trace."""
from __future__ import annotations

import logging

import numpy as np

from pagedbench.workloads.alpaca import load_alpaca
from pagedbench.workloads.alpaca_synthetic import synthetic_alpaca_pairs
from pagedbench.workloads.arrivals import arrival_times, arrival_times_within
from pagedbench.workloads.chat import load_chat
from pagedbench.workloads.config import WorkloadConfig
from pagedbench.workloads.filters import passes_filters
from pagedbench.workloads.pairs import TokenIds, TokenizedPairs
from pagedbench.workloads.request import Request
from pagedbench.workloads.sharegpt import load_sharegpt
from pagedbench.workloads.synthetic import synthetic_pairs
from pagedbench.workloads.trace_file import read_trace
from pagedbench.workloads.trace_replay import replay, row_sampling, trace_pairs
from pagedbench.workloads.trace_size import expected_size, is_large, progress, rows_size, too_large
from pagedbench.workloads.tokenizer import load_tokenizer
from pagedbench.workloads.translation import prefix_len_for_shots, translation_pairs

log = logging.getLogger("workloads")

# Independent random streams derived from cfg.seed: np.random.default_rng([seed, stream]).
# The shuffle uses default_rng(seed) itself.
PAIRS_STREAM = 1
ARRIVAL_STREAM = 2
ALPACA_POOL_SEED = 19_31_58_45


def build_workload(cfg: WorkloadConfig) -> list[Request]:
    """The trace `cfg` names; a pure function of `cfg` (and the dataset file).

    Arrival times come first, from their own stream, so the trace's length
    is known (`num_requests`, or every arrival within `duration_s`). Dataset
    pairs that pass the length filters are then drawn in the order of seeded
    permutations of the pool (`draw_order`): a fresh permutation starts when
    the pool is used up, so a long trace repeats pairs only after using every
    one. The first `num_requests` draws are the same whatever the arrival
    process. Ids are 0..n-1 in arrival order; each request keeps its pool
    index (`pair_index`), its pair's shared prefix if it has one, and the
    config's `n` and `beam_width` (a trace file's own, where it has them).
    Outputs are cut to `max_output_len` before the filters. A replayed trace
    file (arrival=trace) keeps its rows' order and ids (workloads/trace_replay.py).

    The config has checked the trace's expected size against
    `max_trace_requests`; a large trace is announced with its size and built
    behind a progress bar (on a terminal).
    """
    if cfg.name == "trace":
        rows = read_trace(cfg.path)
        n, beam_width = row_sampling(rows, cfg.n, cfg.beam_width, cfg.path)
        if cfg.arrival == "trace":
            size = rows_size(len(rows), f"the rows of {cfg.path}")
            if size.requests > cfg.max_trace_requests:
                raise too_large(size, cfg.max_trace_requests, cfg.label, "replay a shorter file")
            pairs = trace_pairs(rows, np.random.default_rng([cfg.seed, PAIRS_STREAM]), cfg.seed)
            return replay(rows, cap_outputs(pairs, cfg.max_output_len), cfg.path, n, beam_width, cfg.sort_arrivals)
    size = expected_size(cfg)
    if is_large(size.requests):
        log.info("%s: building %s", cfg.label, size.describe())
    arrival_rng = np.random.default_rng([cfg.seed, ARRIVAL_STREAM])
    if cfg.duration_s is not None:
        times = arrival_times_within(cfg.duration_s, cfg.arrival, cfg.request_rate, cfg.burstiness, arrival_rng)
    else:
        times = arrival_times(cfg.num_requests, cfg.arrival, cfg.request_rate, cfg.burstiness, arrival_rng)
    if cfg.name == "trace":
        pairs = trace_pairs(rows, np.random.default_rng([cfg.seed, PAIRS_STREAM]), cfg.seed)
    else:
        pairs = load_pairs(cfg, len(times))
        n, beam_width = np.full(len(pairs), cfg.n), np.full(len(pairs), cfg.beam_width)
    pairs = cap_outputs(pairs, cfg.max_output_len)
    if cfg.name == "synthetic":
        kept = np.arange(len(pairs))
    else:
        mask = passes_filters(pairs.prompt_lens, pairs.output_lens, cfg.min_len, cfg.max_prompt_len,
                              cfg.max_total_len)
        kept = np.flatnonzero(mask)
        log.info("%s: %d of %d pairs pass the length filters (min %d, prompt <= %d, total <= %d)",
                 cfg.label, len(kept), len(pairs), cfg.min_len, cfg.max_prompt_len, cfg.max_total_len)
    if not len(kept):
        raise ValueError(f"{cfg.label}: no pair passes the length filters")
    chosen = draw_order(kept, len(times), np.random.default_rng(cfg.seed))
    if len(chosen) > len(kept):
        log.info("%s: %d requests drawn from a pool of %d pairs (%d permutations)", cfg.label, len(chosen),
                 len(kept), -(-len(chosen) // len(kept)))
    prompts: dict[int, TokenIds] = {}   # a pair drawn again shares its prompt
    out = []
    for i, (t, j) in enumerate(progress(zip(times, chosen.tolist()), len(times), cfg.label)):
        prompt = prompts.get(j)
        if prompt is None:
            prompt = prompts[j] = pairs.prompt(j)
        prefix_id, prefix_len = pairs.prefix(j)
        out.append(Request(id=i, arrival_s=t, prompt_token_ids=prompt, output_len=int(pairs.output_lens[j]),
                           n=int(n[j]), beam_width=int(beam_width[j]), prefix_id=prefix_id,
                           prefix_len=prefix_len, pair_index=j))
    return out


def draw_order(pool: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` draws from `pool`: its seeded permutations back to back, a fresh one whenever it is used up."""
    if n <= 0:
        return np.empty(0, dtype=pool.dtype)
    rounds = -(-n // len(pool))
    return np.concatenate([rng.permutation(pool) for _ in range(rounds)])[:n]


def cap_outputs(pairs: TokenizedPairs, max_output_len: int | None) -> TokenizedPairs:
    """`pairs` with every output cut to at most `max_output_len` tokens (None: as they are)."""
    if max_output_len is None:
        return pairs
    return TokenizedPairs(pairs.prompt_ids, pairs.prompt_offsets, np.minimum(pairs.output_lens, max_output_len),
                          pairs.prefix_ids, pairs.prefix_lens)


def load_pairs(cfg: WorkloadConfig, num_requests: int) -> TokenizedPairs:
    """Every pair the config's source offers, before filtering and sampling."""
    if cfg.name == "sharegpt":
        return load_sharegpt(cfg.path, load_tokenizer(cfg.tokenizer))
    if cfg.name == "chat":
        # The paper's rule: the history is cut to its last max_prompt_len tokens, never dropped for length.
        return load_chat(cfg.path, load_tokenizer(cfg.tokenizer), cfg.max_prompt_len, cfg.chat_history)
    if cfg.name == "translation":
        prefix_len = prefix_len_for_shots(cfg.num_shots)
        if prefix_len + cfg.min_len > cfg.max_prompt_len:
            raise ValueError(f"translation: a {cfg.num_shots}-shot prefix is {prefix_len} tokens, which leaves no "
                             f"room for a sentence within max_prompt_len={cfg.max_prompt_len}")
        return translation_pairs(num_requests, cfg.num_shots, cfg.num_prefixes, cfg.seed,
                                 np.random.default_rng([cfg.seed, PAIRS_STREAM]))
    if cfg.name == "alpaca" and cfg.path is not None:
        return load_alpaca(cfg.path, load_tokenizer(cfg.tokenizer))
    if cfg.name == "alpaca":
        # A fixed pool, like a file: the seed picks from it, as for real data.
        return synthetic_alpaca_pairs(cfg.min_len, np.random.default_rng(ALPACA_POOL_SEED))
    rng = np.random.default_rng([cfg.seed, PAIRS_STREAM])
    return synthetic_pairs(num_requests, cfg.prompt_dist, cfg.output_dist, rng)
