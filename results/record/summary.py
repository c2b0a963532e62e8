"""Summary metrics of one run, computed from its two tables alone.

Every time-averaged figure (batch size, the KV memory split) weights each
iteration by its duration. Each is reported twice: over the whole run, and
over the steady window (`steady_*`), which runs from the end of a warm-up to
the last arrival and leaves out the drain after it, when the last long
requests run nearly alone. For an offline trace (every request at t = 0) the
window ends instead when the queue empties, at the last first admission.
The warm-up is `warmup_fraction` of the span from the first arrival to the
window's end. Steady throughput counts the requests that finish in the
window, and tokens of its iterations, over its length; steady latency
figures and SLO attainment are over the requests that arrive in it, and so
is steady goodput: those of them that meet the SLO, over its length.
The `admission_blocked_by_*` fractions are over the window's iterations in
which a request waited, weighted by duration like the time-averaged figures.

Per-request latencies, as vLLM's benchmark_serving.py defines them (all in
seconds here): TTFT = first token - arrival; TPOT = (finish - first token) /
(output_len - 1), for outputs of more than one token; ITL = every gap between
two consecutive tokens of a request (`token_times_s`), pooled over requests;
end-to-end latency = finish - arrival; normalised latency = end-to-end /
output_len (the paper's). Each is reported as its mean and the percentiles
of `measure.percentiles` (`<metric>_p<P>`, P written as vLLM writes it:
`p99`, `p99.9`). A table recorded before token times has no ITL (NaN).
`build_summary` puts the run's setting beside those metrics: the one place a
summary.json is assembled.
"""
from __future__ import annotations

from dataclasses import dataclass
import itertools
import math

import numpy as np
import pandas as pd

from pagedbench.engines.batch import ADMISSION_LIMITS
from pagedbench.engines.config import EngineConfig
from pagedbench.engines.kv.memory_split import CATEGORIES
from pagedbench.workloads.config import WorkloadConfig

PERCENTILES = (50, 90, 95, 99)
WARMUP_FRACTION = 0.1
SLO_BOUNDS = ("ttft_s", "tpot_s", "itl_s", "e2e_latency_s")


@dataclass(slots=True, frozen=True)
class SLO:
    """Per-request latency bounds in seconds, each optional (None: not bounded). A request meets the SLO
    when it finished and every set bound holds, bounds inclusive; goodput counts the requests that meet it.

    As vLLM's `--goodput` (which bounds ttft, tpot and e2el): TTFT, TPOT and end-to-end latency are each
    request's own, and a one-token output counts as TPOT 0. vLLM has no ITL bound; ours bounds every ITL of
    the request, that is its largest gap between two tokens (the longest stall its user sees); an output of
    one token has no gap and meets it.
    """

    ttft_s: float | None = 1.0
    tpot_s: float | None = 0.1
    itl_s: float | None = None
    e2e_latency_s: float | None = None

    def __post_init__(self) -> None:
        for key in SLO_BOUNDS:
            value = getattr(self, key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"slo.{key} must be a positive number of seconds or null (not bounded), "
                                 f"got {value!r}")


@dataclass(slots=True, frozen=True)
class MeasureConfig:
    """How a run is summarised (`measure:` in the config): the warm-up's share of the arrival span, the
    percentiles every latency distribution reports, the SLO."""

    warmup_fraction: float = WARMUP_FRACTION
    percentiles: tuple[float, ...] = PERCENTILES
    slo: SLO = SLO()
    vllm_detailed: bool = False   # vllm_result.json with its per-request lists (vLLM's --save-detailed)

    def __post_init__(self) -> None:
        w = self.warmup_fraction
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < 1:
            raise ValueError(f"measure.warmup_fraction must be in [0, 1), got {w!r}")
        ps = self.percentiles
        if (not isinstance(ps, (tuple, list)) or not ps or len(set(ps)) != len(ps)
                or any(isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 100 for p in ps)):
            raise ValueError(f"measure.percentiles must be a non-empty list of distinct numbers in [0, 100], "
                             f"got {ps!r}")
        object.__setattr__(self, "percentiles", tuple(ps))
        if not isinstance(self.vllm_detailed, bool):
            raise ValueError(f"measure.vllm_detailed must be true or false, got {self.vllm_detailed!r}")

    @classmethod
    def from_dict(cls, d: dict) -> "MeasureConfig":
        d = dict(d)
        valid = ["percentiles", "slo", "vllm_detailed", "warmup_fraction"]
        unknown = sorted(set(d) - set(valid))
        if unknown:
            raise ValueError(f"unknown measure key(s) {unknown}; valid keys: {valid}")
        slo = d.pop("slo", None) or {}
        unknown = sorted(set(slo) - set(SLO_BOUNDS))
        if unknown:
            raise ValueError(f"unknown measure.slo key(s) {unknown}; valid keys: {sorted(SLO_BOUNDS)}")
        return cls(slo=SLO(**slo), **d)


def percentile_label(p: float) -> str:
    """`p` as vLLM writes it in a key: `99` for an integral percentile, `99.9` otherwise."""
    return str(int(p)) if int(p) == p else str(p)


def summary_percentiles(summary: dict) -> tuple[float, ...]:
    """The percentiles a summary reports, read back from its `ttft_s_p<P>` keys (in the order written)."""
    head = "ttft_s_p"
    return tuple(float(k[len(head):]) for k in summary if k.startswith(head))


def distribution(values, prefix: str, percentiles: tuple[float, ...] = PERCENTILES,
                 scratch: bool = False) -> dict[str, float]:
    """Mean and `percentiles` of `values` (NaN left out) as {prefix_mean: ..., prefix_p50: ...}; NaN when empty.
    `scratch`: `values` is an array of the caller's that it no longer needs, partitioned in place rather than
    copied (a one-hour run pools millions of ITLs). The mean is taken before, on the values in their order."""
    v = np.asarray(values, dtype="float64")
    number = ~np.isnan(v)
    if not number.all():
        v, scratch = v[number], True    # a copy of ours
    del number
    out = {f"{prefix}_mean": float(v.mean()) if v.size else math.nan}
    at = (np.percentile(v, percentiles, overwrite_input=scratch) if v.size    # one partition for all
          else [math.nan] * len(percentiles))
    out.update({f"{prefix}_p{percentile_label(p)}": float(x) for p, x in zip(percentiles, at)})
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


@dataclass(slots=True, frozen=True)
class TokenGaps:
    """Every ITL of a requests table in one array, request after request: the gaps between consecutive
    times of each request's `token_times_s` (one time per step; a group's rows step together)."""

    itl_s: np.ndarray       # [num_gaps]
    owner: np.ndarray       # [num_gaps] int32: the position (row number) in the table of the request each is of
    num_requests: int

    @classmethod
    def of_table(cls, requests: pd.DataFrame) -> "TokenGaps | None":
        """The table's gaps; None when it has no token times (recorded before they were)."""
        if "token_times_s" not in requests:
            return None
        col = requests["token_times_s"]
        lengths = np.fromiter(map(len, col), dtype=np.int64, count=len(col))
        times = np.fromiter(itertools.chain.from_iterable(col), dtype="float64", count=int(lengths.sum()))
        gaps = np.diff(times)
        del times
        starts = np.cumsum(lengths) - lengths                   # where each request's times begin
        starts = starts[(lengths > 0) & (starts > 0)]
        gaps = np.delete(gaps, starts - 1)      # a gap from one request's last time to the next's first is none
        owner = np.repeat(np.arange(len(col), dtype=np.int32), np.maximum(lengths - 1, 0))
        return cls(gaps, owner, len(col))

    def pooled(self, mask: np.ndarray) -> np.ndarray:
        """The ITLs of the requests where `mask` (one bool per request) holds, pooled as vLLM pools them."""
        return self.itl_s[mask[self.owner]]

    def largest(self) -> np.ndarray:
        """Each request's largest ITL; NaN for a request with none."""
        out = np.full(self.num_requests, math.nan)
        if self.itl_s.size:
            starts = np.flatnonzero(np.r_[True, self.owner[1:] != self.owner[:-1]])
            out[self.owner[starts]] = np.maximum.reduceat(self.itl_s, starts)
        return out


def request_latencies(requests: pd.DataFrame, gaps: TokenGaps | None = None) -> pd.DataFrame:
    """Per request, in seconds (NaN where it has none): ttft_s, tpot_s (none for a one-token output),
    e2e_latency_s, norm_latency_s and max_itl_s, its largest ITL (`gaps`: the table's `TokenGaps`)."""
    arrival, first, finish = requests["arrival_s"], requests["first_token_s"], requests["finish_s"]
    out_len = requests["output_len"]
    e2e = finish - arrival
    return pd.DataFrame({
        "ttft_s": first - arrival,
        "tpot_s": ((finish - first) / (out_len - 1)).where(out_len > 1),
        "e2e_latency_s": e2e,
        "norm_latency_s": e2e / out_len,
        "max_itl_s": gaps.largest() if gaps is not None else math.nan,
    }, index=requests.index)


def latency(lat: pd.DataFrame, itl_s: np.ndarray, prefix: str = "",
            percentiles: tuple[float, ...] = PERCENTILES, scratch_itl: bool = False) -> dict[str, float]:
    """Normalised latency, TTFT, TPOT, end-to-end latency (of `request_latencies` rows) and ITL (`itl_s`,
    pooled; `scratch_itl`: reordered in place, see `distribution`) distributions."""
    out = distribution(lat["norm_latency_s"], f"{prefix}norm_latency_s", percentiles)
    out.update(distribution(lat["ttft_s"], f"{prefix}ttft_s", percentiles))
    out.update(distribution(lat["tpot_s"], f"{prefix}tpot_s", percentiles))
    out.update(distribution(itl_s, f"{prefix}itl_s", percentiles, scratch=scratch_itl))
    out.update(distribution(lat["e2e_latency_s"], f"{prefix}e2e_latency_s", percentiles))
    return out


def slo_met(requests: pd.DataFrame, slo: SLO, lat: pd.DataFrame | None = None) -> pd.Series:
    """Per request: finished, with every bound of `slo` holding (see `SLO`). `lat`: its `request_latencies`."""
    if slo.itl_s is not None and "token_times_s" not in requests:
        raise ValueError("measure.slo.itl_s needs the requests table's token_times_s, which this table "
                         "(recorded before token times were) does not have")
    lat = request_latencies(requests, TokenGaps.of_table(requests)) if lat is None else lat
    met = requests["status"] == "finished"
    if slo.ttft_s is not None:
        met &= lat["ttft_s"] <= slo.ttft_s
    if slo.tpot_s is not None:
        met &= lat["tpot_s"].fillna(0.0) <= slo.tpot_s      # one token: TPOT 0, as vLLM's goodput
    if slo.itl_s is not None:
        met &= lat["max_itl_s"].fillna(0.0) <= slo.itl_s    # no gap: nothing exceeds the bound
    if slo.e2e_latency_s is not None:
        met &= lat["e2e_latency_s"] <= slo.e2e_latency_s
    return met


def itls(gaps: TokenGaps | None, mask: pd.Series) -> np.ndarray:
    """The pooled ITLs of the requests where `mask` holds (a fresh array, the caller's); none without token times."""
    return gaps.pooled(mask.to_numpy()) if gaps is not None else np.empty(0)


def window_tokens(iterations: pd.DataFrame, inside: pd.DataFrame, requests: pd.DataFrame, start: float,
                  end: float) -> int:
    """Output tokens of the window: its iterations' rows; for a peer's run (no iteration rows), the streamed
    tokens whose time falls in [start, end), every row of a group counted."""
    if len(iterations) or "token_times_s" not in requests:
        return int(inside["batch_rows" if "batch_rows" in inside else "batch_size"].sum())
    return int(sum(w * sum(start <= t < end for t in times)
                   for times, w in zip(requests["token_times_s"], requests["width"])))


def steady(iterations: pd.DataFrame, requests: pd.DataFrame, lat: pd.DataFrame, gaps: TokenGaps | None,
           met: pd.Series, warmup_fraction: float, percentiles: tuple[float, ...]) -> dict:
    """The `steady_*` figures over the window (NaN when the window is empty). `lat`, `gaps`, `met`: the
    requests' `request_latencies`, `TokenGaps` and `slo_met`."""
    start, end = steady_window(requests, warmup_fraction)
    length = end - start
    out: dict[str, float | int] = {"window_start_s": start, "window_end_s": end, "window_s": length}
    inside = iterations[(iterations["start_s"] >= start) & (iterations["start_s"] < end)]
    finished = requests["status"] == "finished"
    arrived = (requests["arrival_s"] >= start) & (requests["arrival_s"] <= end)
    finished_in = finished & (requests["finish_s"] >= start) & (requests["finish_s"] < end)
    per_s = (lambda n: n / length) if length > 0 else (lambda n: math.nan)
    out.update({
        "steady_num_requests": int(arrived.sum()),
        "steady_requests_per_s": per_s(int(finished_in.sum())),
        "steady_output_tokens_per_s": per_s(window_tokens(iterations, inside, requests, start, end)),
        # No iteration starts in an empty window, and each of these three is NaN over no iteration.
        "steady_memory_saving": memory_saving(inside),
        "steady_mean_batch_size": batch_size(inside),
        **memory_split(inside, "steady_mem"),
        **latency(lat[arrived & finished], itls(gaps, arrived & finished), "steady_", percentiles, True),
        "steady_slo_attainment": float(met[arrived].mean()),   # NaN when none arrived
        "steady_goodput_requests_per_s": per_s(int(met[arrived].sum())),
        **admission_blocked(inside),
    })
    return out


def summarize(iterations: pd.DataFrame, requests: pd.DataFrame, warmup_fraction: float = WARMUP_FRACTION,
              slo: SLO = SLO(), percentiles: tuple[float, ...] = PERCENTILES) -> dict[str, float | int]:
    """Throughput, batch size, time-averaged KV split, latency distributions and goodput; whole run and
    steady window.

    Whole-run throughput counts finished requests over the makespan, from the
    first arrival to the last finish; `output_tokens_per_s` counts generated
    tokens only (every row of a group), `total_tokens_per_s` prompt +
    generated tokens; `goodput_requests_per_s` the finished requests that
    meet the SLO. `slo_attainment` is the share of all requests that meet it.
    """
    finished = requests["status"] == "finished"
    done = requests[finished]
    gaps = TokenGaps.of_table(requests)
    lat = request_latencies(requests, gaps)
    met = slo_met(requests, slo, lat)
    start = float(requests["arrival_s"].min()) if len(requests) else 0.0
    end = float(done["finish_s"].max()) if len(done) else start
    makespan = end - start
    rate = (lambda n: n / makespan) if makespan > 0 else (lambda n: math.nan)
    out: dict[str, float | int] = {
        "num_requests": int(len(requests)),
        "num_finished": int(len(done)),
        "num_rejected": int((requests["status"] == "rejected").sum()),
        "num_failed": int((requests["status"] == "failed").sum()),
        "makespan_s": makespan,
        "requests_per_s": rate(len(done)),
        "output_tokens_per_s": rate(output_tokens(done)),
        "total_tokens_per_s": rate(output_tokens(done) + int(done["prompt_len"].sum())),
        "num_iterations": int(len(iterations)),
        "num_preemptions": int(iterations["preempted"].sum()),
        "kv_capacity_slots": int(iterations["capacity_slots"].iloc[0]) if len(iterations) else 0,
        "mean_batch_size": batch_size(iterations),
        "max_batch_size": int(iterations["batch_size"].max()) if len(iterations) else None,   # None: a peer's
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
    busy = float(iterations["duration_s"].sum())
    out["waiting_time_fraction"] = float(waiting["duration_s"].sum()) / busy if busy > 0 else math.nan
    out.update(latency(lat[finished], itls(gaps, finished), "", percentiles, True))
    out["slo_attainment"] = float(met.mean())   # NaN without requests
    out["goodput_requests_per_s"] = rate(int(met.sum()))
    out.update(steady(iterations, requests, lat, gaps, met, warmup_fraction, percentiles))
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
    trace: dict                  # pagedbench.workloads.trace_stats of the trace
    experiment: str | None
    stop_at_last_arrival: bool
    peer: str | None = None      # a peer's label (backend=transformers / http): the summary's engine


def build_summary(setting: RunSetting, iterations: pd.DataFrame, requests: pd.DataFrame, wall_s: float,
                  warmup_fraction: float, slo: SLO, after_run: dict,
                  percentiles: tuple[float, ...] = PERCENTILES) -> dict:
    """The run's summary.json: its setting, the metrics of its two tables, and what the run cost.

    `after_run` holds the backend's keys known only once the run has ended (the real backend's time
    inside the model forward and the machine's load). `slo_<bound>` keys are null for an unset bound.
    """
    engine, workload = setting.engine, setting.workload
    ours = setting.peer is None
    return {
        "engine": setting.peer or engine.label, "block_size": engine.block_size if ours else None,
        "preemption": engine.preemption if ours else None, "width": setting.width,
        "workload": workload.label, "model": setting.model, "backend": setting.backend, **setting.backend_fields,
        "arrival": workload.arrival, "request_rate": workload.request_rate, "burstiness": workload.burstiness,
        "workload_seed": workload.seed,
        "duration_s": workload.duration_s, "trace_draws": setting.trace["count"],
        "trace_distinct_pairs": setting.trace["distinct_pairs"], "experiment": setting.experiment,
        **summarize(iterations, requests, warmup_fraction, slo, percentiles),
        **{f"slo_{bound}": getattr(slo, bound) for bound in SLO_BOUNDS},
        "stopped_at_last_arrival": setting.stop_at_last_arrival,
        "wall_s": wall_s,
        "iterations_per_wall_s": len(iterations) / wall_s if wall_s > 0 else None,
        **after_run,
    }
