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
