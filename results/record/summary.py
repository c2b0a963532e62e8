"""Summary metrics of one run, computed from its two tables alone.

Every time-averaged figure (batch size, the KV memory split) weights each
iteration by its duration. Each is reported twice: over the whole run, and
over the steady window (`steady_*`), which runs from the end of a warm-up to
the last arrival and leaves out the drain after it, when the last long
requests run nearly alone. For an offline trace (every request at t = 0) the
window ends instead when the queue empties, at the last first admission.
The warm-up is `warmup_fraction` of the span from the first arrival to the
window's end. Steady throughput counts the tokens and finished requests of
the window over its length; steady latency figures (normalized latency,
TTFT, TPOT, SLO attainment) are over the requests that arrive in the window.
The `admission_blocked_by_*` fractions are over the window's iterations in
which a request waited, weighted by duration like the time-averaged figures.
`build_summary` puts the run's setting beside those metrics: the one place a
summary.json is assembled.
"""
from __future__ import annotations

from dataclasses import dataclass
import math

import numpy as np
import pandas as pd

from engines.batch import ADMISSION_LIMITS
from engines.config import EngineConfig
from engines.kv.memory_split import CATEGORIES
from workloads.config import WorkloadConfig

PERCENTILES = (50, 90, 99)
WARMUP_FRACTION = 0.1


@dataclass(slots=True, frozen=True)
class SLO:
    """A request meets the SLO when its TTFT and its TPOT are both within these limits (vLLM's goodput)."""

    ttft_s: float = 1.0
    tpot_s: float = 0.1

    def __post_init__(self) -> None:
        for key in ("ttft_s", "tpot_s"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"slo.{key} must be a positive number of seconds, got {value!r}")


@dataclass(slots=True, frozen=True)
class MeasureConfig:
    """How a run is summarised (`measure:` in the config): the warm-up's share of the arrival span, the SLO."""

    warmup_fraction: float = WARMUP_FRACTION
    slo: SLO = SLO()

    def __post_init__(self) -> None:
        w = self.warmup_fraction
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < 1:
            raise ValueError(f"measure.warmup_fraction must be in [0, 1), got {w!r}")

    @classmethod
    def from_dict(cls, d: dict) -> "MeasureConfig":
        d = dict(d)
        unknown = sorted(set(d) - {"warmup_fraction", "slo"})
        if unknown:
            raise ValueError(f"unknown measure key(s) {unknown}; valid keys: ['warmup_fraction', 'slo']")
        slo = d.pop("slo", None) or {}
        unknown = sorted(set(slo) - {"ttft_s", "tpot_s"})
        if unknown:
            raise ValueError(f"unknown measure.slo key(s) {unknown}; valid keys: ['ttft_s', 'tpot_s']")
        return cls(slo=SLO(**slo), **d)


def distribution(values: pd.Series, prefix: str) -> dict[str, float]:
    """mean, p50, p90, p99 of `values` as {prefix_mean: ..., prefix_p50: ...}; NaN when empty."""
    v = values.dropna().to_numpy(dtype="float64")
    out = {f"{prefix}_mean": float(v.mean()) if v.size else math.nan}
    for p in PERCENTILES:
        out[f"{prefix}_p{p}"] = float(np.percentile(v, p)) if v.size else math.nan
    return out


def weighted_mean(values: pd.Series, durations: pd.Series) -> float:
    """Mean of `values` weighted by iteration duration; NaN when no time passed."""
    total = float(durations.sum())
    return float((values * durations).sum()) / total if total > 0 else math.nan


def memory_split(iterations: pd.DataFrame, prefix: str) -> dict[str, float]:
    """Each KV category's share of capacity, averaged over `iterations` weighted by their duration."""
    if not len(iterations):
        return {f"{prefix}_{cat}": math.nan for cat in CATEGORIES}
    capacity = int(iterations["capacity_slots"].iloc[0])
    return {f"{prefix}_{cat}": weighted_mean(iterations[cat], iterations["duration_s"]) / capacity
            for cat in CATEGORIES}


def output_tokens(done: pd.DataFrame) -> int:
    """Tokens the finished requests generated: output length times the sequences each ran (n, beams)."""
    width = done["width"] if "width" in done else 1
    return int((done["output_len"] * width).sum())


def memory_saving(iterations: pd.DataFrame) -> float:
    """The paper's memory saving: KV slots saved by sharing / slots needed without sharing, each
    averaged over the iterations weighted by their duration; 0 for an engine that shares nothing."""
    if "unshared_slots" not in iterations or not len(iterations):
        return math.nan
    unshared = float((iterations["unshared_slots"] * iterations["duration_s"]).sum())
    allocated = float((iterations["allocated_slots"] * iterations["duration_s"]).sum())
    return 1.0 - allocated / unshared if unshared > 0 else math.nan


def batch_size(iterations: pd.DataFrame) -> float:
    """Sequences in a decode step, averaged over decode iterations weighted by their duration."""
    decode = iterations[iterations["decode_seqs"] > 0]
    return weighted_mean(decode["batch_size"], decode["duration_s"])


def admission_blocked(iterations: pd.DataFrame) -> dict[str, float]:
    """Per limit in `ADMISSION_LIMITS`, `admission_blocked_by_<limit>`: the share of the iterations in which a
    request waited (`num_waiting > 0`) where that limit kept the head of the queue out, each iteration
    weighted by its duration. Other reasons (a static batch running, swapped groups first, a group
    preempted after admission) count in none, so the three need not sum to 1. NaN when no iteration had a
    waiting request, or the table predates the `admission_blocked_by` column."""
    if "admission_blocked_by" not in iterations:
        return {f"admission_blocked_by_{limit}": math.nan for limit in ADMISSION_LIMITS}
    waiting = iterations[iterations["num_waiting"] > 0]
    return {f"admission_blocked_by_{limit}":
            weighted_mean((waiting["admission_blocked_by"] == limit).astype("float64"), waiting["duration_s"])
            for limit in ADMISSION_LIMITS}


def steady_window(requests: pd.DataFrame, warmup_fraction: float = WARMUP_FRACTION) -> tuple[float, float]:
    """(start, end) of the steady window, in the run's clock; start == end when there is none."""
    if not 0 <= warmup_fraction < 1:
        raise ValueError(f"warmup_fraction must be in [0, 1), got {warmup_fraction}")
    if not len(requests):
        return 0.0, 0.0
    first, end = float(requests["arrival_s"].min()), float(requests["arrival_s"].max())
    if end <= first:   # offline: everything arrived at once; the queue empties at the last admission
        admitted = requests["admitted_s"].dropna()
        end = float(admitted.max()) if len(admitted) else first
    return first + warmup_fraction * (end - first), end


def latency(done: pd.DataFrame, prefix: str = "") -> dict[str, float]:
    """Normalized latency, TTFT and TPOT distributions of finished requests."""
    out = distribution((done["finish_s"] - done["arrival_s"]) / done["output_len"], f"{prefix}norm_latency_s")
    out.update(distribution(done["first_token_s"] - done["arrival_s"], f"{prefix}ttft_s"))
    multi = done[done["output_len"] > 1]
    out.update(distribution((multi["finish_s"] - multi["first_token_s"]) / (multi["output_len"] - 1),
                            f"{prefix}tpot_s"))
    return out


def slo_met(requests: pd.DataFrame, slo: SLO) -> pd.Series:
    """Per request: finished with TTFT <= slo.ttft_s and TPOT <= slo.tpot_s (a one-token output has no TPOT)."""
    ttft = requests["first_token_s"] - requests["arrival_s"]
    steps = (requests["output_len"] - 1).clip(lower=1)
    tpot = ((requests["finish_s"] - requests["first_token_s"]) / steps).where(requests["output_len"] > 1, 0.0)
    return (requests["status"] == "finished") & (ttft <= slo.ttft_s) & (tpot <= slo.tpot_s)


def steady(iterations: pd.DataFrame, requests: pd.DataFrame, warmup_fraction: float, slo: SLO) -> dict:
    """The `steady_*` figures over the window (NaN when the window is empty)."""
    start, end = steady_window(requests, warmup_fraction)
    length = end - start
    out: dict[str, float | int] = {"window_start_s": start, "window_end_s": end, "window_s": length}
    inside = iterations[(iterations["start_s"] >= start) & (iterations["start_s"] < end)]
    arrived = requests[(requests["arrival_s"] >= start) & (requests["arrival_s"] <= end)]
    done = arrived[arrived["status"] == "finished"]
    finished_in = requests[(requests["finish_s"] >= start) & (requests["finish_s"] < end)
                           & (requests["status"] == "finished")]
    per_s = (lambda n: n / length) if length > 0 else (lambda n: math.nan)
    met = slo_met(arrived, slo)
    out.update({
        "steady_num_requests": int(len(arrived)),
        "steady_requests_per_s": per_s(len(finished_in)),
        "steady_output_tokens_per_s": per_s(int(inside["batch_rows" if "batch_rows" in inside else "batch_size"].sum())),
        "steady_memory_saving": memory_saving(inside) if length > 0 else math.nan,
        "steady_mean_batch_size": batch_size(inside) if length > 0 else math.nan,
        **{k: (v if length > 0 else math.nan) for k, v in memory_split(inside, "steady_mem").items()},
        **latency(done, "steady_"),
        "steady_slo_attainment": float(met.mean()) if len(arrived) else math.nan,
        "steady_goodput_requests_per_s": per_s(int(met.sum())),
        **admission_blocked(inside),
    })
    return out


def summarize(iterations: pd.DataFrame, requests: pd.DataFrame, warmup_fraction: float = WARMUP_FRACTION,
              slo: SLO = SLO()) -> dict[str, float | int]:
    """Throughput, batch size, time-averaged KV split and latency distributions; whole run and steady window.

    Whole-run throughput counts finished requests over the makespan, from the
    first arrival to the last finish; `output_tokens_per_s` counts generated
    tokens only, `total_tokens_per_s` prompt + generated tokens.
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
        "output_tokens_per_s": rate(output_tokens(done)),
        "total_tokens_per_s": rate(output_tokens(done) + int(done["prompt_len"].sum())),
        "num_iterations": int(len(iterations)),
        "num_preemptions": int(iterations["preempted"].sum()) if len(iterations) else 0,
        "kv_capacity_slots": int(iterations["capacity_slots"].iloc[0]) if len(iterations) else 0,
        "mean_batch_size": batch_size(iterations),
        "max_batch_size": int(iterations["batch_size"].max()) if len(iterations) else 0,
        "memory_saving": memory_saving(iterations),
    }
    if "swapped_out" in iterations:
        out.update({
            "num_swap_outs": int(iterations["swapped_out"].sum()),
            "num_swapped_blocks": int(iterations["swap_blocks"].sum()),
            "num_copied_tokens": int(iterations["copy_tokens"].sum()),
        })
    out.update(memory_split(iterations, "mem"))
    # The same split over the iterations during which a request waited: while memory limits admission.
    waiting = iterations[iterations["num_waiting"] > 0]
    out.update(memory_split(waiting, "mem_waiting"))
    busy = float(iterations["duration_s"].sum()) if len(iterations) else 0.0
    out["waiting_time_fraction"] = float(waiting["duration_s"].sum()) / busy if busy > 0 else math.nan
    out.update(latency(done))
    out.update(steady(iterations, requests, warmup_fraction, slo))
    out["drain_s"] = end - out["window_end_s"] if len(done) else math.nan
    return out


@dataclass(slots=True, frozen=True)
class RunSetting:
    """What a run was: its engine, trace and backend, as the summary names them."""

    engine: EngineConfig
    workload: WorkloadConfig
    model: str
    backend: str
    backend_fields: dict         # the backend's own keys (hardware and budget, or device, dtype and load)
    width: int                   # rows of the widest request
    trace: dict                  # workloads.trace_stats of the trace
    experiment: str | None
    stop_at_last_arrival: bool


def build_summary(setting: RunSetting, iterations: pd.DataFrame, requests: pd.DataFrame, wall_s: float,
                  warmup_fraction: float, slo: SLO, after_run: dict) -> dict:
    """The run's summary.json: its setting, the metrics of its two tables, and what the run cost.

    `after_run` holds the backend's keys known only once the run has ended (the real backend's time
    inside the model forward and the machine's load).
    """
    engine, workload = setting.engine, setting.workload
    paged = engine.name == "paged"
    return {
        "engine": engine.label, "block_size": engine.block_size if paged else None,
        "preemption": engine.preemption if paged else None, "width": setting.width,
        "workload": workload.label, "model": setting.model, "backend": setting.backend, **setting.backend_fields,
        "arrival": workload.arrival, "request_rate": workload.request_rate, "workload_seed": workload.seed,
        "duration_s": workload.duration_s, "trace_draws": setting.trace["count"],
        "trace_distinct_pairs": setting.trace["distinct_pairs"], "experiment": setting.experiment,
        **summarize(iterations, requests, warmup_fraction, slo),
        "slo_ttft_s": slo.ttft_s, "slo_tpot_s": slo.tpot_s,
        "stopped_at_last_arrival": setting.stop_at_last_arrival,
        "wall_s": wall_s,
        "iterations_per_wall_s": len(iterations) / wall_s if wall_s > 0 else None,
        **after_run,
    }
