"""The replay's comparison of one engine: the sim against the mean of the real repeats, beside the real
repeats against each other (the noise floor the sim cannot be asked to beat).

Per iteration (only when every run executed the same iterations, as an offline trace makes them):
the sim's MAPE against the repeats' mean time of each iteration, overall, prefill and decode; and
`real_iteration_mape_pct`, the MAPE of one repeat against another (mean over ordered pairs, so it is
symmetric).
Per run, for each of METRICS: the repeats' mean (`real_KEY`), the sim's (`sim_KEY`), the sim's error
against that mean (`KEY_error_pct`) and the repeats' spread, max - min over mean (`KEY_real_spread_pct`).
"""
from __future__ import annotations

from itertools import permutations

import numpy as np
import pandas as pd

from pagedbench.results.report.replay_table import METRICS

SHAPE = ("prefill_seqs", "prefill_tokens", "decode_seqs", "decode_rows")


def same_schedule(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Whether two runs executed the same iterations (the same batch shapes in the same order)."""
    return len(a) == len(b) and all((a[c].to_numpy() == b[c].to_numpy()).all() for c in SHAPE)


def mape_pct(predicted: np.ndarray, actual: np.ndarray) -> float:
    return 100 * float(np.mean(np.abs((predicted - actual) / actual))) if len(actual) else np.nan


def spread_pct(values: list[float]) -> float:
    """max - min over the mean, in %; NaN for a mean of 0."""
    mean = float(np.mean(values))
    return 100 * (max(values) - min(values)) / mean if mean else np.nan


def compare(real: list[tuple[dict, pd.DataFrame]], sim: tuple[dict, pd.DataFrame]) -> dict:
    """One engine's row: `real` its repeats and `sim` its sim run, each (summary, iterations table)."""
    frames = [f for _, f in real]
    sim_summary, sim_frame = sim
    same = all(same_schedule(frames[0], f) for f in (*frames[1:], sim_frame))
    row = {"iterations": len(frames[0]), "repeats": len(real), "same_schedule": same}
    if same:
        times = np.stack([f["duration_s"].to_numpy(dtype=float) for f in frames])   # [repeats, iterations]
        mean, predicted = times.mean(axis=0), sim_frame["duration_s"].to_numpy(dtype=float)
        decode = (frames[0]["decode_seqs"] > 0).to_numpy()
        row["iteration_mape_pct"] = mape_pct(predicted, mean)
        row["prefill_iteration_mape_pct"] = mape_pct(predicted[~decode], mean[~decode])
        row["decode_iteration_mape_pct"] = mape_pct(predicted[decode], mean[decode])
        row["real_iteration_mape_pct"] = float(np.mean([mape_pct(times[j], times[i])
                                                        for i, j in permutations(range(len(frames)), 2)]))
    else:
        row.update({k: np.nan for k in ("iteration_mape_pct", "prefill_iteration_mape_pct",
                                         "decode_iteration_mape_pct", "real_iteration_mape_pct")})
    for key, _ in METRICS:
        values = [float(s[key]) for s, _ in real]
        mean = float(np.mean(values))
        row[f"real_{key}"], row[f"sim_{key}"] = mean, sim_summary[key]
        row[f"{key}_error_pct"] = 100 * (sim_summary[key] - mean) / mean if mean else np.nan
        row[f"{key}_real_spread_pct"] = spread_pct(values)
    return row
