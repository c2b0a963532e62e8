"""Summary statistics of a trace: length percentiles, token totals, arrival rate, sampling and prefixes."""
from __future__ import annotations

import math

import numpy as np

from pagedbench.workloads.request import Request

PERCENTILES = (50, 90, 99)


def trace_stats(requests: list[Request]) -> dict:
    """Count, length percentiles, total tokens, arrival span and offered rate.

    `offered_rate` is (count - 1) / duration: n requests span n - 1 gaps.
    It is inf when every request arrives at once (offline). `n_max` and
    `beam_width_max` are the widest sampling; `prefixed` counts the requests
    with a shared prefix, `distinct_prefixes` their prefix ids and
    `prefix_len_mean` their prefixes' mean length (0 without any).
    """
    if not requests:
        raise ValueError("trace_stats needs at least one request")
    prompt = np.array([r.prompt_len for r in requests], dtype=np.int64)
    output = np.array([r.output_len for r in requests], dtype=np.int64)
    arrivals = np.array([r.arrival_s for r in requests], dtype=np.float64)
    duration = float(arrivals.max() - arrivals.min())
    stats = {"count": len(requests)}
    for name, lens in (("prompt", prompt), ("output", output)):
        stats[f"{name}_mean"] = float(lens.mean())
        for p in PERCENTILES:
            stats[f"{name}_p{p}"] = float(np.percentile(lens, p))
        stats[f"{name}_max"] = int(lens.max())
        stats[f"{name}_tokens"] = int(lens.sum())
    stats["total_tokens"] = stats["prompt_tokens"] + stats["output_tokens"]
    stats["duration_s"] = duration
    drawn = [r.pair_index for r in requests if r.pair_index is not None]
    stats["distinct_pairs"] = len(set(drawn)) if drawn else len(requests)
    stats["offered_rate"] = (len(requests) - 1) / duration if duration > 0 else math.inf
    stats["n_max"] = max(r.n for r in requests)
    stats["beam_width_max"] = max(r.beam_width for r in requests)
    prefixed = [r for r in requests if r.prefix_id is not None]
    stats["prefixed"] = len(prefixed)
    stats["distinct_prefixes"] = len({r.prefix_id for r in prefixed})
    stats["prefix_len_mean"] = float(np.mean([r.prefix_len for r in prefixed])) if prefixed else 0.0
    return stats


def format_stats(stats: dict, name: str) -> str:
    """A few lines for a terminal or a log."""
    distinct = f" ({stats['distinct_pairs']} distinct pairs)" if stats["distinct_pairs"] < stats["count"] else ""
    lines = [f"{name}: {stats['count']} requests{distinct}, {stats['total_tokens']} tokens "
             f"({stats['prompt_tokens']} prompt + {stats['output_tokens']} output)"]
    for kind in ("prompt", "output"):
        lines.append(
            f"  {kind:<6} len  mean {stats[f'{kind}_mean']:8.2f}  p50 {stats[f'{kind}_p50']:6.0f}  "
            f"p90 {stats[f'{kind}_p90']:6.0f}  p99 {stats[f'{kind}_p99']:6.0f}  max {stats[f'{kind}_max']:6d}"
        )
    if stats.get("n_max", 1) > 1 or stats.get("beam_width_max", 1) > 1:
        lines.append(f"  sampling    n up to {stats['n_max']}, beam width up to {stats['beam_width_max']}")
    if stats.get("prefixed"):
        lines.append(f"  prefixes    {stats['prefixed']} requests share {stats['distinct_prefixes']} prefix(es) of "
                     f"{stats['prefix_len_mean']:.1f} tokens on average")
    if math.isinf(stats["offered_rate"]):
        lines.append("  arrivals    all at t=0 (offline)")
    else:
        lines.append(f"  arrivals    over {stats['duration_s']:.1f} s, offered {stats['offered_rate']:.3f} req/s")
    return "\n".join(lines)
