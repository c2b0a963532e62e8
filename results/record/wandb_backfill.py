"""Logging finished runs and sweeps to Weights & Biases afterwards, under the names a live run uses.

    python -m pagedbench.results.record.wandb_backfill RUN_OR_SWEEP_DIR [RUN_OR_SWEEP_DIR ...] [--again]
        [--mode offline|online] [--project P] [--entity E] [--group G] [--tags T ...]

A run folder (`summary.json` in it) becomes one wandb run, as `logger=wandb`
would have logged it live: the config and metadata block (from the
summary's metadata), the per-iteration series from iterations.parquet
(`iteration/*` against `clock_s`), the request table and the summary; its
group is its sweep's (the nearest folder above it holding Hydra's
`multirun.yaml`), else none. A sweep folder: each finished run under it,
then the sweep's own run (`log_sweep`, also what the Hydra callback logs
when a sweep ends), job_type "sweep", in the same group: its tables
(`aggregate`, one row per run; `capacity` and `capacity_ratios` when the
sweep is a capacity search; `latency_vs_rate`, one row per run at a finite
rate with `seed` and `line` columns and a chart of one line per engine and
seed; `block_size` when the paged engine ran at several block sizes) and
the aggregate's figures (`figures/*.png`) as images.

A folder that already holds a wandb run (`<folder>/wandb/*run-*`) is
skipped unless `--again`: logged live, or backfilled before. The logger
settings are conf/logger/wandb.yaml's (offline: `wandb sync` the folders
printed) with the flags' changes. Imports wandb only to log.
"""
from __future__ import annotations

import argparse
import logging
import math
from pathlib import Path
import sys

import pandas as pd
import yaml

from pagedbench.paths import CONF
from pagedbench.results.record.store import SUMMARY, TABLES, read_summary
from pagedbench.results.record.wandb_logger import (LoggerConfig, active_config, close_failed, run_name, said_where,
                                         start_wandb, sweep_group, warn_failed)
from pagedbench.results.record.wandb_series import CLOCK, bucket_starts, series_points, series_row

log = logging.getLogger("pagedbench")
WANDB_DIR = "wandb"                  # where a run's wandb runs go (`logger.dir: null`)
SWEEP_MARK = "multirun.yaml"         # Hydra writes it at the top of every sweep folder
# A sweep's tables and figures, as pagedbench.results.report.aggregate and pagedbench.results.sweeps.capacity name them
# (tests/results/test_wandb_backfill.py holds the names to theirs).
AGGREGATE = "aggregate.parquet"
CAPACITY_TABLES = {"capacity": "capacity.csv", "capacity_ratios": "capacity_ratios.csv"}
FIGURES = "figures"


def already_logged(folder: Path) -> bool:
    """Whether `folder` holds a wandb run already (offline or online)."""
    return any((Path(folder) / WANDB_DIR).glob("*run-*"))


def run_group(run_dir: Path) -> str | None:
    """The group a live run in `run_dir` had: its sweep folder's (`sweep_group`), or None outside a sweep."""
    for folder in Path(run_dir).resolve().parents:
        if (folder / SWEEP_MARK).is_file():
            return sweep_group(folder)
    return None


def run_config(summary: dict) -> dict:
    """The wandb config of a live run: the full config, and the metadata block without its copy of it."""
    meta = summary.get("metadata") or {}
    return {**(meta.get("config") or {}), "metadata": {k: v for k, v in meta.items() if k != "config"}}


def iteration_series(iterations: pd.DataFrame, max_points: int) -> pd.DataFrame:
    """A finished run's series (iterations.parquet): `step` (a point's first iteration index) and
    `series_points`' columns, in at most `max_points` near-equal buckets (one iteration each when few)."""
    if len(iterations) == 0:
        return pd.DataFrame(columns=["step", CLOCK])
    starts = bucket_starts(len(iterations), max_points)
    points = series_points(iterations, starts, iterations["capacity_slots"].to_numpy())
    return pd.DataFrame({"step": iterations["iteration"].to_numpy()[starts], **points})


def log_to_wandb(logger_cfg: dict | LoggerConfig, config: dict, run_dir: Path, iterations: pd.DataFrame,
                 requests: pd.DataFrame, summary: dict, group: str | None = None,
                 name: str | None = None) -> Path | None:
    """Log a finished run if `logger_cfg` says wandb; the wandb run's folder, or None.

    The series in at most `max_iteration_points` near-equal buckets, then the
    request table and the summary (`summary` without its metadata block).
    `group` applies when `logger.group` is null; `name` defaults to
    `run_name(summary)`. Does nothing, without importing wandb, for
    `logger=none` or `mode: disabled`. Any failure is one warning line.
    """
    wandb_run = start_wandb(logger_cfg, config, run_dir, name or run_name(summary), group)
    if wandb_run is None:
        return None
    try:
        wandb_run.define_series()
        series = iteration_series(iterations, wandb_run.cfg.max_iteration_points)
        for step, *values in series.itertuples(index=False, name=None):
            wandb_run.run.log(series_row(dict(zip(series.columns[1:], values))), step=int(step))
        wandb_run.log_end(requests, summary)
        wandb_run.finish()
    except Exception as err:   # wandb raises many kinds; none may cost the run its results
        warn_failed(err, run_dir)
        close_failed(wandb_run)
        return None
    said_where(wandb_run)
    return wandb_run.folder


def log_run_folder(run_dir: Path, logger_cfg: dict | LoggerConfig, group: str | None = None,
                   again: bool = False) -> Path | None:
    """Log the finished run in `run_dir` (unless it holds a wandb run already and not `again`); the wandb
    run's folder, or None (also for an unreadable folder: one warning line). `group` None: `run_group`'s."""
    run_dir = Path(run_dir)
    if active_config(logger_cfg) is None:
        return None
    if already_logged(run_dir) and not again:
        log.info("wandb: %s holds a wandb run already (--again logs it again)", run_dir)
        return None
    try:
        summary = read_summary(run_dir)
        iterations, requests = pd.read_parquet(run_dir / TABLES[0]), pd.read_parquet(run_dir / TABLES[1])
    except (OSError, ValueError) as err:   # a folder's results are never at stake here
        log.warning("wandb: cannot log %s: %s: %s", run_dir, type(err).__name__, err)
        return None
    return log_to_wandb(logger_cfg, run_config(summary), run_dir, iterations, requests,
                        {k: v for k, v in summary.items() if k != "metadata"}, group or run_group(run_dir))


def steady(df: pd.DataFrame, column: str) -> pd.Series:
    """A figure over the steady window where the run has it, else over the whole run (as the figures read)."""
    whole = pd.to_numeric(df[column], errors="coerce") if column in df else pd.Series(math.nan, index=df.index)
    if f"steady_{column}" not in df:
        return whole
    window = pd.to_numeric(df[f"steady_{column}"], errors="coerce")
    return window.where(window.notna(), whole)


def _columns(df: pd.DataFrame, names: tuple[str, ...]) -> dict:
    return {name: df[name] for name in names if name in df}


def latency_table(aggregate: pd.DataFrame) -> pd.DataFrame:
    """Mean normalized latency (s/token) vs request rate, one row per run at a finite rate; `line` names
    one curve per engine (and block size), setting and seed."""
    if not {"request_rate", "engine", "workload"} <= set(aggregate.columns):
        return pd.DataFrame()
    rate = pd.to_numeric(aggregate["request_rate"], errors="coerce")
    runs = aggregate.assign(request_rate=rate)[rate.notna() & (rate < math.inf)]
    blank = pd.Series(None, index=runs.index, dtype=object)
    seed, block = runs.get("workload_seed", blank), runs.get("block_size", blank)
    models = runs["model"] if "model" in runs and runs["model"].nunique() > 1 else blank
    line = [" | ".join([f"{e} bs{int(b)}" if pd.notna(b) else str(e), str(w), *([str(m)] if pd.notna(m) else []),
                        *([f"seed {s}"] if pd.notna(s) else [])])
            for e, b, w, m, s in zip(runs["engine"], block, runs["workload"], models, seed)]
    table = pd.DataFrame({"line": line, **_columns(runs, ("engine", "block_size", "workload", "model")),
                          "seed": seed, "request_rate": runs["request_rate"],
                          "norm_latency_s": steady(runs, "norm_latency_s_mean"),
                          **_columns(runs, ("requests_per_s", "output_tokens_per_s", "run_dir"))})
    return table.sort_values(["line", "request_rate"], kind="mergesort").reset_index(drop=True)


def block_size_table(aggregate: pd.DataFrame) -> pd.DataFrame:
    """The paged runs, when the sweep ran the paged engine at two or more block sizes (else empty)."""
    if "block_size" not in aggregate or "engine" not in aggregate:
        return pd.DataFrame()
    paged = aggregate[(aggregate["engine"] == "paged") & aggregate["block_size"].notna()]
    if paged["block_size"].nunique() < 2:
        return pd.DataFrame()
    return pd.DataFrame({**_columns(paged, ("workload", "model", "block_size", "request_rate", "workload_seed")),
                         **{c: steady(paged, c) for c in ("mean_batch_size", "mem_token_states",
                                                          "norm_latency_s_mean", "requests_per_s")},
                         **_columns(paged, ("run_dir",))}).reset_index(drop=True)


def sweep_tables(sweep_dir: Path) -> dict[str, pd.DataFrame]:
    """The sweep's tables by wandb key, each only when the sweep has it."""
    sweep_dir = Path(sweep_dir)
    tables = {}
    if (sweep_dir / AGGREGATE).is_file():
        aggregate = pd.read_parquet(sweep_dir / AGGREGATE)
        tables = {"aggregate": aggregate, "latency_vs_rate": latency_table(aggregate),
                  "block_size": block_size_table(aggregate)}
    else:
        log.warning("wandb: %s has no %s; run `python -m pagedbench.results.report.aggregate %s` first for its tables "
                    "and figures", sweep_dir, AGGREGATE, sweep_dir)
    for key, name in CAPACITY_TABLES.items():
        if (sweep_dir / name).is_file():
            tables[key] = pd.read_csv(sweep_dir / name)
    return {f"sweep/{k}": v for k, v in tables.items() if len(v)}


def log_sweep(sweep_dir: Path, logger_cfg: dict | LoggerConfig, config: dict | None = None,
              again: bool = True) -> Path | None:
    """The sweep's own wandb run (tables, figures), in its runs' group; its folder, or None (not logging, or
    a failure: one warning line). `config`: the sweep's config (the Hydra callback's), recorded as given."""
    sweep_dir = Path(sweep_dir)
    if active_config(logger_cfg) is None:
        return None
    if already_logged(sweep_dir) and not again:
        log.info("wandb: %s holds a wandb run already (--again logs it again)", sweep_dir)
        return None
    group = sweep_group(sweep_dir.resolve())
    wandb_run = start_wandb(logger_cfg, {"sweep_dir": str(sweep_dir), **(config or {})}, sweep_dir,
                            f"sweep-{group}", group, job_type="sweep")
    if wandb_run is None:
        return None
    try:
        tables = sweep_tables(sweep_dir)
        for key, df in tables.items():
            wandb_run.log_table(key, df)
        curves = tables.get("sweep/latency_vs_rate")
        if curves is not None:
            table = wandb_run.wandb.Table(dataframe=curves[["line", "request_rate", "norm_latency_s"]])
            wandb_run.run.log({"sweep/latency_vs_rate_chart": wandb_run.wandb.plot.line(
                table, "request_rate", "norm_latency_s", stroke="line",
                title="normalized latency (s/token) vs request rate (req/s), one line per engine and seed")})
        figures = sorted((sweep_dir / FIGURES).glob("*.png"))
        if figures:
            wandb_run.log_figures(figures)
        aggregate = tables.get("sweep/aggregate")
        wandb_run.run.summary.update({"runs": 0 if aggregate is None else len(aggregate),
                                      "tables": sorted(tables), "figures": [p.name for p in figures]})
        wandb_run.finish()
    except Exception as err:
        warn_failed(err, sweep_dir)
        close_failed(wandb_run)
        return None
    said_where(wandb_run)
    return wandb_run.folder


def run_folders(sweep_dir: Path) -> list[Path]:
    """Every finished run folder under `sweep_dir`, in path order; hidden and wandb folders are not entered."""
    return sorted(p.parent for p in Path(sweep_dir).rglob(SUMMARY)
                  if not any(part.startswith(".") or part == WANDB_DIR
                             for part in p.relative_to(sweep_dir).parts[:-1]))


def default_logger() -> dict:
    """conf/logger/wandb.yaml, the settings `logger=wandb` starts from."""
    return yaml.safe_load((CONF / "logger" / "wandb.yaml").read_text())


def backfill(folder: Path, logger_cfg: dict, again: bool = False) -> list[Path]:
    """Log a run folder, or a sweep folder's runs and then the sweep itself; the wandb folders written."""
    folder = Path(folder)
    if (folder / SUMMARY).is_file():
        return [p for p in [log_run_folder(folder, logger_cfg, again=again)] if p is not None]
    group = sweep_group(folder.resolve())
    written = [log_run_folder(run_dir, logger_cfg, group, again) for run_dir in run_folders(folder)]
    written.append(log_sweep(folder, logger_cfg, again=again))
    return [p for p in written if p is not None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.results.record.wandb_backfill",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, metavar="RUN_OR_SWEEP_DIR")
    parser.add_argument("--again", action="store_true", help="log folders that hold a wandb run already")
    parser.add_argument("--mode", choices=("offline", "online"), help="default: conf/logger/wandb.yaml's (offline)")
    parser.add_argument("--project", help="wandb project (default: conf/logger/wandb.yaml's)")
    parser.add_argument("--entity", help="wandb entity (default: your default entity)")
    parser.add_argument("--group", help="one group for everything logged (default: each sweep folder's name)")
    parser.add_argument("--tags", nargs="*", help="tags of every wandb run logged")
    args = parser.parse_args(argv)
    for folder in args.folders:
        if not folder.is_dir():
            print(f"error: {folder}: no such folder", file=sys.stderr)
            return 2
        if not (folder / SUMMARY).is_file() and not run_folders(folder):
            print(f"error: {folder}: no finished run ({SUMMARY}) in it or under it", file=sys.stderr)
            return 2
    logger_cfg = default_logger()
    logger_cfg.update({k: v for k, v in vars(args).items()
                       if k in ("mode", "project", "entity", "group", "tags") and v is not None})
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    written = [p for folder in args.folders for p in backfill(folder, logger_cfg, args.again)]
    for path in written:
        print(f"logged: {path}")
    print(f"{len(written)} wandb run(s) written" + ("; upload with `wandb sync FOLDER...`"
                                                   if logger_cfg.get("mode") == "offline" and written else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
