"""The compact table printed at the end of a run."""
from __future__ import annotations

import re

ROWS = (
    ("requests finished / rejected", lambda s: f"{s['num_finished']} / {s['num_rejected']}"),
    ("throughput (req/s)", lambda s: f"{s['requests_per_s']:.3f}"),
    ("output tokens/s", lambda s: f"{s['output_tokens_per_s']:.1f}"),
    ("prompt+output tokens/s", lambda s: f"{s['total_tokens_per_s']:.1f}"),
    ("mean decode batch size", lambda s: f"{s['mean_batch_size']:.2f}"),
    ("KV token states %", lambda s: f"{100 * s['mem_token_states']:.1f}"),
    ("KV reservation %", lambda s: f"{100 * s['mem_reservation']:.1f}"),
    ("KV internal frag. %", lambda s: f"{100 * s['mem_internal_fragmentation']:.1f}"),
    ("KV external frag. & others %", lambda s: f"{100 * s['mem_external_fragmentation']:.1f}"),
    ("KV free %", lambda s: f"{100 * s['mem_free']:.1f}"),
    ("KV token states % while requests wait",
     lambda s: f"{100 * s['mem_waiting_token_states']:.1f} ({100 * s['waiting_time_fraction']:.0f}% of the time)"),
    ("norm. latency mean/p50/p99 (s/tok)",
     lambda s: f"{s['norm_latency_s_mean']:.4f} / {s['norm_latency_s_p50']:.4f} / {s['norm_latency_s_p99']:.4f}"),
    ("TTFT mean/p99 from arrival (s)", lambda s: f"{s['ttft_s_mean']:.3f} / {s['ttft_s_p99']:.3f}"),
    ("TPOT mean/p99 (s)", lambda s: f"{s['tpot_s_mean']:.4f} / {s['tpot_s_p99']:.4f}"),
    ("KV memory saved by sharing %", lambda s: f"{100 * s['memory_saving']:.1f}"),
    ("preemptions (of them swapped out)", lambda s: f"{s['num_preemptions']} ({s['num_swap_outs']})"),
    ("KV tokens copied / blocks swapped", lambda s: f"{s['num_copied_tokens']} / {s['num_swapped_blocks']}"),
    ("iterations", lambda s: f"{s['num_iterations']}"),
)


def format_summary(summary: dict, title: str) -> str:
    """One line per row the summary has data for: a row with none (the KV rows of a peer over HTTP, whose memory
    cannot be read) is left out, not printed as n/a."""
    lines = [title]
    width = max(len(name) for name, _ in ROWS)
    for name, fmt in ROWS:
        try:
            value = fmt(summary)
        except (TypeError, ValueError, KeyError):
            continue
        if not re.search(r"\d", value.replace("nan", "")):   # every figure of the row missing
            continue
        lines.append(f"  {name:<{width}}  {value.replace('nan', 'n/a')}")
    return "\n".join(lines)



def with_spread(entry: dict, key: str, digits: int) -> str:
    """`entry[key]` with its spread over rounds, `entry[key_min]`-`entry[key_max]`, where they differ ("n/a" where
    the entry has no figure): the cells of a table of repeated runs, as the studies print them and the report."""
    if entry.get(key) is None:
        return "n/a"
    low, high = entry.get(f"{key}_min"), entry.get(f"{key}_max")
    text = f"{entry[key]:.{digits}f}"
    return text if low is None or low == high else f"{text} ({low:.{digits}f}-{high:.{digits}f})"


SCHEDULE_FIGURES = (("running_mean", 1), ("running_max", 0), ("waiting_mean", 1), ("kv_usage_max", 2),
                    ("preemptions", 0))


def schedule_cells(entry: dict) -> list[str]:
    """One row of the peers' schedule table: its row and source, each schedule figure with its spread, rounds."""
    return [entry["row"], entry["source"], *(with_spread(entry, k, d) for k, d in SCHEDULE_FIGURES),
            str(entry["rounds"])]
