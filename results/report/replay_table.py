"""The replay's table: the sim against the real backend on one trace, per engine (`python -m studies.replay`
writes it as replay.csv; the report and the study print it the same way)."""
from __future__ import annotations

import pandas as pd

# The run-level figures compared, with their labels: each becomes sim_KEY, real_KEY and KEY_error_pct columns.
METRICS = (("makespan_s", "makespan (s)"), ("output_tokens_per_s", "output tok/s"),
           ("mean_batch_size", "mean decode batch"), ("ttft_s_mean", "TTFT mean (s)"),
           ("tpot_s_mean", "TPOT mean (s)"))


def format_table(table: pd.DataFrame) -> str:
    lines = ["| engine | per-iteration MAPE | " + " | ".join(f"{label}: sim / real (error)" for _, label in METRICS)
             + " |", "|---|---|" + "---|" * len(METRICS)]
    for r in table.to_dict("records"):
        cells = [r["engine"], "n/a (schedules differ)" if not r["same_schedule"] else
                 f"{r['iteration_mape_pct']:.1f}% (prefill {r['prefill_iteration_mape_pct']:.1f}%, "
                 f"decode {r['decode_iteration_mape_pct']:.1f}%)"]
        for key, _ in METRICS:
            cells.append(f"{r[f'sim_{key}']:.4g} / {r[f'real_{key}']:.4g} ({r[f'{key}_error_pct']:+.1f}%)")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
