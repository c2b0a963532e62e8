"""The paper experiment's per-step record: each real iteration's cost-model features and host time, and the
device time of a sample of steps.

`StepRecorder` wraps an executor (`pagedbench.engines.protocols.Executor`) and passes every call through;
`execute` it also times and describes, as `pagedbench.studies.profile.features` describes a profiled shape
(kind, layout, rows, tokens, prefill pairs, decode context, blocks read), so the sim's linear cost model can
be fitted to the runs' own iterations (`pagedbench.studies.fit.fit` reads these rows as it reads a profile).

On a GPU, the `profile_steps` steps after the clock passes `profile_from_s` also run under torch's profiler:
the kernels' summed device time per step, against the step's wall time on the host, says how much of a step
the GPU was busy (a host-bound step is mostly launch and Python time). On a CPU there is no device time.
"""
from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import torch

from pagedbench.engines.batch import Batch


def step_features(batch: Batch, block_size: int | None) -> dict:
    """The iteration as the cost model sees it (`pagedbench.studies.profile.features`' columns)."""
    prefill = batch.is_prefill
    lens = batch.computed_prefill_lens if prefill else batch.decode_context_lens
    paged = block_size is not None
    blocks = sum(-(-n // block_size) for n in lens) if paged and not prefill else 0
    return {"kind": "prefill" if prefill else "decode", "layout": "paged" if paged else "contiguous",
            "block_size": block_size or 0, "rows": len(lens),
            "tokens": batch.num_tokens,
            "prefill_pairs": sum(n * (n + 1) for n in lens) if prefill else 0,
            "decode_ctx": 0 if prefill else sum(lens), "decode_blocks": blocks,
            "max_len": max(lens, default=0)}


def kernel_seconds(prof: torch.profiler.profile) -> float:
    """The summed self time of the device's kernels in a finished profile, in seconds."""
    total_us = 0.0
    for event in prof.key_averages():
        total_us += getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0) or 0
    return total_us / 1e6


class StepRecorder:
    """An executor that records every `execute` (features, host seconds) and profiles a sample on a GPU."""

    def __init__(self, inner, block_size: int | None, device: torch.device, profile_from_s: float = math.inf,
                 profile_steps: int = 20, activity: torch.profiler.ProfilerActivity | None = None):
        self.inner, self.block_size, self.device = inner, block_size, device
        # What the sample profiles: the device's kernels on a GPU; nothing on a CPU (a test may ask for CPU ops).
        if activity is None and device.type == "cuda":
            activity = torch.profiler.ProfilerActivity.CUDA
        self.activity = activity
        self.profile_from_s, self.profile_steps = profile_from_s, profile_steps
        self.rows: list[dict] = []
        self.profiled_steps = 0
        self.profiled_wall_s = 0.0
        self.profiled_device_s: float | None = None
        self._prof = None
        self._profiled_from = 0

    def __getattr__(self, name):   # everything but `execute` is the executor's own
        return getattr(self.inner, name)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _maybe_start_profile(self) -> None:
        if (self.activity is None or self._prof is not None or self.profiled_device_s is not None
                or self.inner.now() < self.profile_from_s):
            return
        self._sync()
        self._prof = torch.profiler.profile(activities=[self.activity])
        self._prof.__enter__()
        self._profiled_from = len(self.rows)

    def _maybe_stop_profile(self, force: bool = False) -> None:
        if self._prof is None or (not force and len(self.rows) - self._profiled_from < self.profile_steps):
            return
        self._sync()
        self._prof.__exit__(None, None, None)
        sample = self.rows[self._profiled_from:]
        self.profiled_steps = len(sample)
        self.profiled_wall_s = float(sum(r["host_s"] for r in sample))
        self.profiled_device_s = kernel_seconds(self._prof)
        self._prof = None

    def execute(self, batch: Batch) -> float:
        self._maybe_start_profile()
        features = step_features(batch, self.block_size)
        started = time.perf_counter()
        duration = self.inner.execute(batch)
        self.rows.append({**features, "time_s": float(duration), "host_s": time.perf_counter() - started})
        self._maybe_stop_profile()
        return duration

    def finish(self) -> None:
        """End a profile the run's end cut short."""
        self._maybe_stop_profile(force=True)

    def table(self, engine: str) -> pd.DataFrame:
        """One row per iteration: the features, `time_s` (the executor's duration), `host_s` (wall around it)."""
        df = pd.DataFrame(self.rows, columns=["kind", "layout", "block_size", "rows", "tokens", "prefill_pairs",
                                              "decode_ctx", "decode_blocks", "max_len", "time_s", "host_s"])
        df.insert(0, "engine", engine)
        return df

    def device_share(self) -> dict:
        """The profiled sample: steps, wall and device milliseconds per step, and the device's busy share."""
        if not self.profiled_steps or self.profiled_device_s is None:
            return {"profiled_steps": 0, "step_wall_ms": np.nan, "step_device_ms": np.nan, "device_busy": np.nan}
        wall = 1e3 * self.profiled_wall_s / self.profiled_steps
        dev = 1e3 * self.profiled_device_s / self.profiled_steps
        return {"profiled_steps": self.profiled_steps, "step_wall_ms": wall, "step_device_ms": dev,
                "device_busy": dev / wall if wall > 0 else np.nan}
