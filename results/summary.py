"""Summary metrics of one run, computed from its two tables alone."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from engines.kv.memory_split import CATEGORIES

PERCENTILES = (50, 90, 99)


def distribution(values: pd.Series, prefix: str) -> dict[str, float]:
    """mean, p50, p90, p99 of `values` as {prefix_mean: ..., prefix_p50: ...}; NaN when empty."""
    v = values.dropna().to_numpy(dtype="float64")
    out = {f"{prefix}_mean": float(v.mean()) if v.size else math.nan}
    for p in PERCENTILES:
        out[f"{prefix}_p{p}"] = float(np.percentile(v, p)) if v.size else math.nan
    return out


def memory_split(iterations: pd.DataFrame, prefix: str) -> dict[str, float]:
    """Each KV category's share of capacity, averaged over `iterations` weighted by their duration."""
    busy = float(iterations["duration_s"].sum()) if len(iterations) else 0.0
    if busy <= 0:
        return {f"{prefix}_{cat}": math.nan for cat in CATEGORIES}
    capacity = int(iterations["capacity_slots"].iloc[0])
    return {f"{prefix}_{cat}": float((iterations[cat] * iterations["duration_s"]).sum()) / busy / capacity
            for cat in CATEGORIES}


def summarize(iterations: pd.DataFrame, requests: pd.DataFrame) -> dict[str, float | int]:
    """Throughput, batch size, time-averaged KV split and latency distributions.

    Throughput counts finished requests over the makespan, from the first
    arrival to the last finish; `output_tokens_per_s` counts generated tokens
    only, `total_tokens_per_s` prompt + generated tokens.
    """
    done = requests[requests["status"] == "finished"]
    start = float(requests["arrival_s"].min()) if len(requests) else 0.0
    end = float(done["finish_s"].max()) if len(done) else start
    makespan = end - start
    rate = (lambda n: n / makespan) if makespan > 0 else (lambda n: math.nan)
    out: dict[str, float | int] = {
        "num_requests": int(len(requests)),
        "num_finished": int(len(done)),
        "num_rejected": int((requests["status"] == "rejected").sum()),
        "makespan_s": makespan,
        "requests_per_s": rate(len(done)),
        "output_tokens_per_s": rate(int(done["output_len"].sum())),
        "total_tokens_per_s": rate(int(done["output_len"].sum() + done["prompt_len"].sum())),
        "num_iterations": int(len(iterations)),
        "num_preemptions": int(iterations["preempted"].sum()) if len(iterations) else 0,
        "kv_capacity_slots": int(iterations["capacity_slots"].iloc[0]) if len(iterations) else 0,
    }
    decode = iterations[iterations["decode_seqs"] > 0]
    out["mean_batch_size"] = float(decode["batch_size"].mean()) if len(decode) else math.nan
    out["max_batch_size"] = int(iterations["batch_size"].max()) if len(iterations) else 0
    out.update(memory_split(iterations, "mem"))
    # The same split over the iterations during which a request waited: while memory limits admission.
    out.update(memory_split(iterations[iterations["num_waiting"] > 0], "mem_waiting"))
    out["waiting_time_fraction"] = (
        float(iterations.loc[iterations["num_waiting"] > 0, "duration_s"].sum() / iterations["duration_s"].sum())
        if len(iterations) and iterations["duration_s"].sum() > 0 else math.nan)
    out.update(distribution((done["finish_s"] - done["arrival_s"]) / done["output_len"], "norm_latency_s"))
    out.update(distribution(done["first_token_s"] - done["arrival_s"], "ttft_s"))
    multi = done[done["output_len"] > 1]
    out.update(distribution((multi["finish_s"] - multi["first_token_s"]) / (multi["output_len"] - 1), "tpot_s"))
    return out
