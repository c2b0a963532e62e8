"""When each request of a trace arrives."""
from __future__ import annotations

import math

import numpy as np


def arrival_times(
    n: int, process: str, rate: float, burstiness: float, rng: np.random.Generator
) -> list[float]:
    """`n` non-decreasing arrival times in seconds.

    - offline: every request at t = 0 (the whole trace is queued at once).
    - poisson: exponential gaps with mean 1 / rate.
    - gamma:   gamma gaps with shape b = burstiness and scale 1 / (rate * b),
               so the mean gap is still 1 / rate and the squared coefficient
               of variation is 1 / b (b = 1 is Poisson).

    The first request arrives at t = 0 and request i at the sum of the first
    i gaps, as in vLLM's serving benchmark (send, then wait one gap): a run
    starts loaded rather than idle for a random first gap, and n requests
    span n - 1 gaps.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if process == "offline":
        return [0.0] * n
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"arrival process {process!r} needs a finite rate > 0, got {rate}")
    if process == "poisson":
        gaps = rng.exponential(1.0 / rate, size=max(n - 1, 0))
    elif process == "gamma":
        if not (math.isfinite(burstiness) and burstiness > 0):
            raise ValueError(f"gamma burstiness must be finite and > 0, got {burstiness}")
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=max(n - 1, 0))
    else:
        raise ValueError(f"arrival process must be 'offline', 'poisson' or 'gamma', got {process!r}")
    times = np.concatenate([np.zeros(min(n, 1)), np.cumsum(gaps)])
    return times.tolist()


def arrival_times_within(duration_s: float, process: str, rate: float, burstiness: float,
                         rng: np.random.Generator) -> list[float]:
    """Every arrival in [0, duration_s) of the process `arrival_times` describes: the first at t = 0.

    Gaps are drawn in chunks from `rng` until their sum passes the duration,
    so the count is random with mean about rate x duration.
    """
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ValueError(f"duration_s must be finite and > 0, got {duration_s}")
    if process == "offline":
        raise ValueError("an offline trace has no duration: every request arrives at t=0")
    chunk = max(16, int(rate * duration_s * 1.1) + 16)
    times = [0.0]
    while times[-1] < duration_s:
        base = times[-1]
        times.extend(base + t for t in arrival_times(chunk + 1, process, rate, burstiness, rng)[1:])
    return [t for t in times if t < duration_s]
