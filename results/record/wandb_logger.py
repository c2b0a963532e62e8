"""Logging one finished run to Weights & Biases: config, per-iteration series, request table, summary.

Offline by default (`conf/logger/wandb.yaml`, `mode: offline`): wandb writes the
run beside the run's results, under `<run folder>/wandb/offline-run-*`, never
asks for a login and never touches the network. Upload later, from a machine
that is logged in (`wandb login`), with

    wandb sync outputs/runs/DATE/TIME_ENGINE_WORKLOAD/wandb/offline-run-*
    wandb sync outputs/multirun/DATE/TIME/*/wandb/offline-run-*      # every run of a sweep
    wandb sync outputs/experiments/NAME/*/wandb/offline-run-*        # every run of an experiment

Logging starts after the run's tables and summary are on disk, and a wandb
error here is one warning line: it never costs a run its results.
`import wandb` is slow (seconds), so it happens only when `logger=wandb`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import logging
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd

from engines.specs.mapping import build_from_mapping
from engines.kv.memory_split import CATEGORIES

log = logging.getLogger("pagedbench")
NAMES = ("none", "wandb")
MODES = ("offline", "online", "disabled")
SERIES = "iteration"   # history keys are `iteration/<name>`; `iteration/start_s` is their x-axis


@dataclass(slots=True)
class LoggerConfig:
    """The `logger` config group: `none`, or `wandb` and how to reach it."""

    name: str = "none"
    mode: str = "offline"
    project: str = "pagedbench"
    entity: str | None = None
    dir: str | None = None            # null: the run folder
    group: str | None = None          # null: the caller's (a sweep's folder name), or none
    tags: list[str] = field(default_factory=list)
    max_iteration_points: int = 5000  # the per-iteration series is cut into at most this many points
    max_request_rows: int = 10000     # wandb's own limit for a logged table

    def __post_init__(self) -> None:
        if self.name not in NAMES:
            raise ValueError(f"logger.name={self.name!r} is not one of {list(NAMES)}")
        if self.mode not in MODES:
            raise ValueError(f"logger.mode={self.mode!r} is not one of {list(MODES)}")
        for key in ("max_iteration_points", "max_request_rows"):
            value = getattr(self, key)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"logger.{key} must be a positive integer, got {value!r}")
        self.tags = [str(t) for t in (self.tags or [])]

    @classmethod
    def from_dict(cls, d: dict) -> "LoggerConfig":
        return build_from_mapping(cls, d, "logger")

    @property
    def active(self) -> bool:
        return self.name == "wandb" and self.mode != "disabled"


def bucket_starts(n: int, max_points: int) -> np.ndarray:
    """First row of each of min(n, max_points) contiguous, near-equal buckets of n rows."""
    k = min(n, max_points)
    return (np.arange(k, dtype=np.int64) * n) // k


def iteration_series(iterations: pd.DataFrame, max_points: int) -> pd.DataFrame:
    """The series to chart, one row per bucket of consecutive iterations (one iteration each when few).

    Every point covers its whole bucket, so nothing between points is lost:
    `preempted` is the bucket's sum; `tokens_per_s` is its computed tokens
    (prefill tokens + one per decoded sequence) over its duration; levels
    (batch size, waiting requests, KV split as fractions of capacity, the
    memory saved by sharing, swapped requests) are means weighted by
    iteration duration, like the summary's `mem_*`; `swapped_out` is a sum.
    `step` and `start_s` are the bucket's first iteration.
    """
    if len(iterations) == 0:
        return pd.DataFrame(columns=["step", "start_s"])
    starts = bucket_starts(len(iterations), max_points)

    def sums(values) -> np.ndarray:
        return np.add.reduceat(np.asarray(values, dtype=np.float64), starts)

    duration = sums(iterations["duration_s"])
    count = sums(np.ones(len(iterations)))
    weight = iterations["duration_s"].to_numpy(dtype=np.float64)

    def level(values) -> np.ndarray:
        values = np.asarray(values, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(duration > 0, sums(values * weight) / duration, sums(values) / count)

    capacity = iterations["capacity_slots"].to_numpy(dtype=np.float64)
    # One token per decoded sequence: every row of a request of several (samples, beams) when recorded.
    decoded = (iterations["batch_rows"].where(iterations["decode_seqs"] > 0, 0) if "batch_rows" in iterations
               else iterations["decode_seqs"])
    with np.errstate(invalid="ignore", divide="ignore"):
        tokens_per_s = np.where(duration > 0, sums(iterations["prefill_tokens"] + decoded) / duration, np.nan)
    out = {
        "step": iterations["iteration"].to_numpy()[starts],
        "start_s": iterations["start_s"].to_numpy(dtype=np.float64)[starts],
        "batch_size": level(iterations["batch_size"]),
        "tokens_per_s": tokens_per_s,
        "num_waiting": level(iterations["num_waiting"]),
        "preempted": sums(iterations["preempted"]),
        **{f"mem_{cat}": level(iterations[cat].to_numpy(dtype=np.float64) / capacity) for cat in CATEGORIES},
    }
    if "unshared_slots" in iterations:   # sharing and swapping (runs recorded since they were added)
        unshared = iterations["unshared_slots"].to_numpy(dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            saved = np.where(unshared > 0, 1 - iterations["allocated_slots"].to_numpy(dtype=np.float64) / unshared, 0.0)
        out.update(memory_saving=level(saved), swapped_out=sums(iterations["swapped_out"]),
                   num_swapped=level(iterations["num_swapped"]))
    return pd.DataFrame(out)


def plain_value(value):
    """A value as strict JSON holds it: Python scalars, None for NaN / NA, "inf" for an infinity.

    Dicts and lists (a config) are converted throughout. An infinity is kept
    as a string because it means something (`request_rate: .inf` = all at once).
    """
    if isinstance(value, dict):
        return {k: plain_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_value(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def table_rows(df: pd.DataFrame, max_rows: int) -> list[list]:
    """`df`'s rows as Python lists, evenly sampled down to `max_rows`; missing values as None."""
    if len(df) > max_rows:
        df = df.iloc[bucket_starts(len(df), max_rows)]
    return [[plain_value(v) for v in row] for row in df.astype(object).itertuples(index=False, name=None)]


def run_name(summary: dict) -> str:
    """`ENGINE[-bsN]-WORKLOAD[-rateR]`, e.g. `paged-bs16-sharegpt-rate2`; offline arrivals have no rate."""
    parts = [str(summary.get("engine", "run"))]
    if summary.get("block_size"):
        parts.append(f"bs{summary['block_size']}")
    parts.append(str(summary.get("workload", "")))
    if summary.get("arrival") not in (None, "offline") and summary.get("request_rate"):
        parts.append(f"rate{summary['request_rate']:g}")
    return "-".join(p for p in parts if p)


def sweep_group(sweep_dir: str | Path) -> str:
    """A sweep folder as a wandb group, unique per sweep and shared by its runs.

    `outputs/multirun/2026-01-31/12-00-00` -> `2026-01-31_12-00-00`;
    `outputs/experiments/throughput` -> `experiments_throughput`.
    """
    return "_".join(Path(sweep_dir).parts[-2:])


class WandbRun:
    """One wandb run for one pagedbench run: `start`, `log_run`, optionally `log_figures`, `finish`."""

    def __init__(self, run, wandb, cfg: LoggerConfig, mode: str) -> None:
        self.run = run
        self.wandb = wandb   # the module, imported by `start`
        self.cfg = cfg
        self.mode = mode     # `offline` also when `online` fell back for lack of credentials

    @classmethod
    def start(cls, logger_cfg: dict | LoggerConfig, config: dict, run_dir: Path, name: str,
              group: str | None = None) -> "WandbRun":
        cfg = logger_cfg if isinstance(logger_cfg, LoggerConfig) else LoggerConfig.from_dict(logger_cfg)
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb   # slow: only when logging to wandb

        mode = cfg.mode
        if mode == "online" and not wandb.login(prompt=False, verify=False):
            log.warning("wandb: no credentials (WANDB_API_KEY or `wandb login`): logging offline instead")
            mode = "offline"
        where = Path(cfg.dir) if cfg.dir is not None else Path(run_dir)
        where.mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(
            mode=mode, silent=True,
            console="off",                # leave stdout and Hydra's log alone
            x_disable_stats=True,         # no sampling thread taking CPU while other runs time things
            x_disable_machine_info=True,  # no cloud-metadata probes over the network
        )
        run = wandb.init(project=cfg.project, entity=cfg.entity, dir=str(where), name=name,
                         group=cfg.group or group, tags=cfg.tags, config=plain_value(config),
                         settings=settings, reinit="create_new")
        return cls(run, wandb, cfg, mode)

    @property
    def folder(self) -> Path:
        """This run's wandb folder (`.../wandb/offline-run-*`): what `wandb sync` takes."""
        return Path(self.run.dir).parent

    def log_run(self, iterations: pd.DataFrame, requests: pd.DataFrame, summary: dict) -> None:
        """The per-iteration series (step = iteration index), the request table, the summary metrics."""
        run = self.run
        run.define_metric(f"{SERIES}/start_s", summary="none")
        # Charts of the series plot against the run's clock (simulated or wall) by default;
        # the iteration index stays available as the step. No last-value copies in the summary.
        run.define_metric(f"{SERIES}/*", step_metric=f"{SERIES}/start_s", summary="none")
        series = iteration_series(iterations, self.cfg.max_iteration_points)
        keys = [c for c in series.columns if c != "step"]
        for step, *values in series[["step", *keys]].itertuples(index=False, name=None):
            row = {f"{SERIES}/{k}": float(v) for k, v in zip(keys, values) if math.isfinite(v)}
            run.log(row, step=int(step))
        rows = table_rows(requests, self.cfg.max_request_rows)
        run.log({"requests": self.wandb.Table(columns=[str(c) for c in requests.columns], data=rows)})
        run.summary.update(plain_value(summary))

    def log_figures(self, paths: list[Path]) -> None:
        """Images (e.g. a sweep's plots), each under `figures/<file stem>`."""
        self.run.log({f"figures/{Path(p).stem}": self.wandb.Image(str(p)) for p in paths})

    def finish(self, failed: bool = False) -> None:
        self.run.finish(exit_code=1 if failed else 0)


def log_to_wandb(logger_cfg: dict, config: dict, run_dir: Path, iterations: pd.DataFrame,
                 requests: pd.DataFrame, summary: dict, group: str | None = None,
                 name: str | None = None) -> Path | None:
    """Log a finished run if `logger_cfg` says wandb; the wandb run's folder, or None.

    `config` is the whole resolved config; `group` (e.g. the sweep folder's
    name) applies when `logger.group` is null; `name` defaults to
    `run_name(summary)`. Does nothing, without importing wandb, for
    `logger=none` or `mode: disabled`. Any failure is one warning line.
    """
    try:
        cfg = LoggerConfig.from_dict(logger_cfg)
    except ValueError as err:
        log.warning("wandb logging skipped: %s", err)
        return None
    if not cfg.active:
        return None
    wandb_run = None
    try:
        wandb_run = WandbRun.start(cfg, config, run_dir, name or run_name(summary), group)
        wandb_run.log_run(iterations, requests, summary)
        wandb_run.finish()
    except Exception as err:   # wandb raises many kinds; none may cost the run its results
        first_line = (str(err).strip().splitlines() or [""])[0]
        log.warning("wandb logging failed (the run's results are in %s): %s: %s",
                    run_dir, type(err).__name__, first_line)
        if wandb_run is not None:
            try:
                wandb_run.finish(failed=True)
            except Exception:
                pass
        return None
    if wandb_run.mode == "offline":
        log.info("wandb: offline run in %s; upload with `wandb sync %s`", wandb_run.folder, wandb_run.folder)
    return wandb_run.folder
