"""Logging a run to Weights & Biases while it goes: config, per-iteration series, request table, summary.

`LiveRun` is started before the engine loop and fed each iteration through
`run_engine`'s `on_iteration` hook (`LiveSeries`: at most about
`logger.max_iteration_points` points, each covering its stretch of
iterations, against the run's own clock `clock_s`: simulated seconds on the
sim, wall seconds on the real backend); once the run's tables and summary are
on disk it adds the request table and the summary. A finished run, a run
folder or a sweep is logged afterwards, under the same names, by
`pagedbench.results.record.wandb_backfill`.

Offline by default (`conf/logger/wandb.yaml`, `mode: offline`): wandb writes the
run beside the run's results, under `<run folder>/wandb/offline-run-*`, never
asks for a login and never touches the network. Upload later, from a machine
that is logged in (`wandb login`), with

    wandb sync outputs/runs/DATE/TIME_ENGINE_WORKLOAD/wandb/offline-run-*
    wandb sync outputs/multirun/DATE/TIME/*/wandb/offline-run-*      # every run of a sweep
    wandb sync outputs/experiments/NAME/*/wandb/offline-run-*        # every run of an experiment
    wandb sync outputs/experiments/NAME/wandb/offline-run-*          # the experiment's own run (tables, figures)

A wandb error is one warning line: it stops the logging, never the run, and
never costs a run its results. `import wandb` is slow (seconds), so it
happens only when `logger=wandb`.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
import logging
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from pagedbench.engines.specs.mapping import build_from_mapping
from pagedbench.results.record.wandb_series import CLOCK, SERIES, LiveSeries, bucket_starts

if TYPE_CHECKING:
    from pagedbench.workloads.request import Request

log = logging.getLogger("pagedbench")
NAMES = ("none", "wandb")
MODES = ("offline", "online", "disabled")


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
    max_iteration_points: int = 2000  # the per-iteration series is cut into about this many points
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


def scalar_columns(df: pd.DataFrame) -> pd.DataFrame:
    """`df` without its columns of sequences (one array per row), which a wandb table cannot chart."""
    def holds_sequences(column: pd.Series) -> bool:
        values = column[column.notna()] if column.dtype == object else column.iloc[:0]
        return len(values) > 0 and isinstance(values.iloc[0], (list, tuple, np.ndarray))

    return df[[c for c in df.columns if not holds_sequences(df[c])]]


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
    """One wandb run: `start`, then any of `define_series`, `log_end`, `log_table`, `log_figures`; `finish`."""

    def __init__(self, run, wandb, cfg: LoggerConfig, mode: str) -> None:
        self.run = run
        self.wandb = wandb   # the module, imported by `start`
        self.cfg = cfg
        self.mode = mode     # `offline` also when `online` fell back for lack of credentials

    @classmethod
    def start(cls, logger_cfg: dict | LoggerConfig, config: dict, run_dir: Path, name: str,
              group: str | None = None, job_type: str = "run") -> "WandbRun":
        """A new wandb run under `run_dir` (or `logger.dir`); `job_type` "run" for a run, "sweep" for a sweep's
        own run, so the dashboard can filter one from the other."""
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
                         group=cfg.group or group, job_type=job_type, tags=cfg.tags, config=plain_value(config),
                         settings=settings, reinit="create_new")
        return cls(run, wandb, cfg, mode)

    @property
    def folder(self) -> Path:
        """This run's wandb folder (`.../wandb/offline-run-*`): what `wandb sync` takes."""
        return Path(self.run.dir).parent

    def define_series(self) -> None:
        """Charts of `iteration/*` plot against the run's clock; the iteration index stays the step.
        No last-value copies of the series in the summary."""
        self.run.define_metric(CLOCK, summary="none")
        self.run.define_metric(f"{SERIES}/*", step_metric=CLOCK, summary="none")

    def log_end(self, requests: pd.DataFrame, summary: dict) -> None:
        """The request table (sampled down to `max_request_rows`; per-token columns such as `token_times_s`
        stay in requests.parquet) and the summary metrics."""
        self.log_table("requests", scalar_columns(requests), self.cfg.max_request_rows)
        self.run.summary.update(plain_value(summary))

    def log_table(self, key: str, df: pd.DataFrame, max_rows: int | None = None) -> None:
        rows = table_rows(df, max_rows or self.cfg.max_request_rows)
        self.run.log({key: self.wandb.Table(columns=[str(c) for c in df.columns], data=rows,
                                            allow_mixed_types=True)})

    def log_figures(self, paths: list[Path]) -> None:
        """Images (e.g. a sweep's plots), each under `figures/<file stem>`."""
        self.run.log({f"figures/{Path(p).stem}": self.wandb.Image(str(p)) for p in paths})

    def finish(self, failed: bool = False) -> None:
        self.run.finish(exit_code=1 if failed else 0)


def warn_failed(err: Exception, run_dir: Path) -> None:
    """A wandb failure as one warning line."""
    first_line = (str(err).strip().splitlines() or [""])[0]
    log.warning("wandb logging failed (the run's results are in %s): %s: %s", run_dir, type(err).__name__,
                first_line)


def close_failed(wandb_run: WandbRun | None) -> None:
    if wandb_run is not None:
        try:
            wandb_run.finish(failed=True)
        except Exception:
            pass


def active_config(logger_cfg: dict | LoggerConfig) -> LoggerConfig | None:
    """The logger config when it says to log to wandb; None for `logger=none`, `mode: disabled`, or a bad
    config (one warning line)."""
    try:
        cfg = logger_cfg if isinstance(logger_cfg, LoggerConfig) else LoggerConfig.from_dict(logger_cfg)
    except ValueError as err:
        log.warning("wandb logging skipped: %s", err)
        return None
    return cfg if cfg.active else None


def start_wandb(logger_cfg: dict | LoggerConfig, config: dict, run_dir: Path, name: str, group: str | None = None,
                job_type: str = "run") -> WandbRun | None:
    """`WandbRun.start` if `logger_cfg` says wandb (`active_config`), else None without importing wandb;
    None with one warning line if it fails to start."""
    cfg = active_config(logger_cfg)
    if cfg is None:
        return None
    try:
        return WandbRun.start(cfg, config, run_dir, name, group, job_type)
    except Exception as err:   # wandb raises many kinds; none may cost the run its results
        warn_failed(err, run_dir)
        return None


def said_where(wandb_run: WandbRun) -> None:
    if wandb_run.mode == "offline":
        log.info("wandb: offline run in %s; upload with `wandb sync %s`", wandb_run.folder, wandb_run.folder)


class LiveRun:
    """A run logged while it goes: `series` is the engine loop's `on_iteration`; `end` adds the request table
    and the summary once they are on disk and closes the run. A wandb error is one warning line and ends
    the logging, never the run."""

    def __init__(self, wandb_run: WandbRun, run_dir: Path, capacity: int, expected_rows: int) -> None:
        self.wandb_run = wandb_run
        self.run_dir = run_dir
        self.broken = False
        self.closed = False
        wandb_run.define_series()
        self.series = LiveSeries(self._log, capacity, expected_rows, wandb_run.cfg.max_iteration_points)

    def _log(self, row: dict, step: int) -> None:
        if self.broken:
            return
        try:
            self.wandb_run.run.log(row, step=step)
        except Exception as err:
            self._fail(err)

    def _fail(self, err: Exception) -> None:
        warn_failed(err, self.run_dir)
        self.broken = True
        self.close(failed=True)

    def end(self, requests: pd.DataFrame, summary: dict) -> None:
        """The series' last point, the request table, the summary; then the run is closed."""
        try:
            self.series.flush()
            if not self.broken:
                self.wandb_run.log_end(requests, summary)
                self.close()
                said_where(self.wandb_run)
        except Exception as err:
            self._fail(err)

    def close(self, failed: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        if failed:
            close_failed(self.wandb_run)
            return
        try:
            self.wandb_run.finish()
        except Exception as err:
            warn_failed(err, self.run_dir)


@contextmanager
def live_run(logger_cfg: dict, config: dict, run_dir: Path, name: str, group: str | None, capacity: int,
             requests: list[Request]) -> Iterator[LiveRun | None]:
    """A `LiveRun` for the block (None when not logging, or wandb failed to start: one warning line). The
    block calls `end` once the run's results are on disk; a block that raises leaves the run marked failed.
    `requests`, the trace: its output tokens spread the series' points over the run."""
    wandb_run = start_wandb(logger_cfg, config, run_dir, name, group)
    live = None
    if wandb_run is not None:
        try:
            live = LiveRun(wandb_run, run_dir, capacity, sum(r.width * r.output_len for r in requests))
        except Exception as err:
            warn_failed(err, run_dir)
            close_failed(wandb_run)
    try:
        yield live
    except BaseException:
        if live is not None:
            live.close(failed=True)
        raise
    if live is not None:
        live.close()
