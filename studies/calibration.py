"""A replay's calibration: the real backend profiled in the replay's own process, immediately before and
after its real runs, fitted to a hardware preset held in memory, with the host's time between iterations
measured on those runs.

Why around the runs and in one process: on a shared machine the same real run went from 340 to 759 output
tok/s minutes apart, while a profile taken just before and just after a run predicted it within a few per
cent. A preset fitted earlier carries the machine's speed of that earlier hour; this one carries the
speed the runs saw. The shapes are `pagedbench.studies.profile`'s grid, timed through its `Profiler` in a seeded
random order (a new order each pass), so a drift in the machine's speed spreads over all shapes instead of
bending the fit along the grid's order. The before and after rows are fitted together
(`pagedbench.studies.fit.fit`); how much the machine moved between them is the profile's drift (after / before,
median over shapes).

`scheduler_s` is the host's time between two iterations (scheduling, bookkeeping, recording), which a
profile of `execute` alone does not see: the median over every real run's iterations of the next
iteration's start less this one's end, one number for every engine. Nothing is written under conf/:
the replay saves the preset it used as OUT/preset.yaml.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
import datetime
import gc
from pathlib import Path
import statistics
import sys

import numpy as np
import pandas as pd
import torch
import yaml

from pagedbench.engines.specs.hardware import HardwareSpec
from pagedbench.engines.specs.presets import load_model
from pagedbench.results.record.store import atomic_write
from pagedbench.studies.fit import fit
from pagedbench.studies.profile import Profiler, features, grid


@dataclass(slots=True, frozen=True)
class ProfilePlan:
    """How each profile (before, after) runs: `passes` over the grid, each shape `warmup` times untimed
    then `repeats` times (the row keeps their median); the full grid or the quick one; the order's seed.
    The full grid by default: on a 2-core CPU a decode step of 2 rows takes 1.6x one of 1 row and no
    longer than one of 8, a step the quick grid (batches 1, 8, 16) does not see, and static and Orca
    batches sit at 2 to 4."""

    passes: int = 2
    warmup: int = 1
    repeats: int = 3
    quick: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        for key, least in (("passes", 0), ("warmup", 0), ("repeats", 1)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"profile {key} must be an integer >= {least}, got {value!r}")


def release_memory() -> None:
    """Free what dropped models and KV caches held, before the next one is built."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def profile_phase(model: str, device: str, dtype: str, plan: ProfilePlan, phase: str,
                  rng: np.random.Generator) -> tuple[pd.DataFrame, dict]:
    """One profile (`phase`: before or after): every shape of the grid once per pass, in a random order
    drawn from `rng`; one row per shape and pass, with the features the fit reads; and what it ran on."""
    shapes = grid(load_model(model).max_seq_len, plan.quick)
    profiler = Profiler(model, device, dtype, shapes)
    rows = []
    for p in range(1, plan.passes + 1):
        for index in rng.permutation(len(shapes)):
            times = profiler.time(shapes[index], plan.warmup, plan.repeats)
            rows.append({**features(shapes[index]), "time_s": statistics.median(times), "time_min_s": min(times),
                         "repeats": plan.repeats, "phase": phase, "pass": p, "shape": int(index)})
    env = {"model": profiler.spec.name, "dtype": str(profiler.dtype).removeprefix("torch."),
           "device": str(profiler.device), "kernels": profiler.ops.name, "torch": str(torch.__version__),
           "torch_threads": torch.get_num_threads(),
           "profiled": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    del profiler
    release_memory()
    return pd.DataFrame(rows), env


def profile_drift(profile: pd.DataFrame) -> float:
    """How much slower the machine ran after the real runs than before: after / before - 1 of each shape's
    median time, the median over shapes; NaN without both phases."""
    by = profile.groupby(["shape", "phase"])["time_s"].median().unstack()
    if not {"before", "after"} <= set(by.columns):
        return float("nan")
    return float((by["after"] / by["before"] - 1).median())


def host_gaps(iterations: pd.DataFrame) -> np.ndarray:
    """Seconds between each iteration's end and the next one's start, on a run's clock."""
    start = iterations["start_s"].to_numpy(dtype=float)
    end = start + iterations["duration_s"].to_numpy(dtype=float)
    return start[1:] - end[:-1]


def scheduler_seconds(runs: list[pd.DataFrame]) -> float:
    """The host's time between iterations: the median gap over all of `runs`' iterations (every engine
    together: one number, never an engine's own), 0 if no run has two iterations. On a trace whose requests
    arrive over time some gaps are idle waits; the median leaves those few out."""
    gaps = np.concatenate([host_gaps(f) for f in runs]) if runs else np.array([])
    return max(0.0, float(np.median(gaps))) if gaps.size else 0.0


def calibrated(base: HardwareSpec, name: str, profile: pd.DataFrame, env: dict, scheduler_s: float) -> HardwareSpec:
    """`base`'s numbers (memory, links) with a `fitted` block from `profile` and `scheduler_s`, as
    pagedbench.studies.fit writes one, in memory."""
    coef, residuals = fit(profile)
    source = {"profile": "in process, before and after the real runs", **env, "base_preset": base.name,
              "profile_drift": round(profile_drift(profile), 4),
              "fitted": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "residuals": {k: (round(v, 4) if isinstance(v, float) else v) for k, v in residuals.items()}}
    fitted = {"model": env.get("model"), "dtype": env.get("dtype"), **{k: float(f"{v:.6g}") for k, v in coef.items()},
              "scheduler_s": float(f"{scheduler_s:.6g}"), "source": source}
    return replace(base, name=name, fitted=fitted)


def with_scheduler(hardware: HardwareSpec, scheduler_s: float) -> HardwareSpec:
    """A fitted preset with the measured `scheduler_s`; a datasheet preset (no fitted block) as it is."""
    if hardware.fitted is None:
        print(f"note: {hardware.name} has no fitted block: the sim adds no host time between iterations "
              f"(measured {1e3 * scheduler_s:.2f} ms)", file=sys.stderr)
        return hardware
    return replace(hardware, fitted={**hardware.fitted, "scheduler_s": float(f"{scheduler_s:.6g}")})


def write_preset(hardware: HardwareSpec, path: Path, how: str) -> Path:
    """The preset the sim used, as a hardware YAML (HardwareSpec.from_dict reads it back)."""
    text = f"# {how}\n" + yaml.safe_dump(asdict(hardware), sort_keys=False)
    atomic_write(path, lambda tmp: Path(tmp).write_text(text))
    return path
