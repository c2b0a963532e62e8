"""One table of a whole sweep, with its figures, written beside its run folders.

    python -m pagedbench.results.report.aggregate SWEEP_DIR [SWEEP_DIR ...] [--threshold S]

The table is `pagedbench.results.sweeps.collect.collect`'s: one row per finished run.
`write_aggregate` writes `aggregate.parquet`, `aggregate.csv`, `failures.csv`
(only when some runs failed) and the figures under `figures/`, each
atomically, and removes the ones an earlier call wrote that the runs no
longer support, so the outputs always match the run folders.
"""
from __future__ import annotations

import argparse
import logging
import math
from pathlib import Path
import sys

import pandas as pd

from pagedbench.results.record.store import atomic_write, write_parquet
from pagedbench.results.sweeps.sustainable import DEFAULT_THRESHOLD, format_ratios, format_rates, ratios, sustainable_rates
from pagedbench.results.sweeps.collect import check_sweep_dir, collect, collect_failures, mixed_code_note

log = logging.getLogger("pagedbench")

AGGREGATE_PARQUET = "aggregate.parquet"
AGGREGATE_CSV = "aggregate.csv"
FAILURES_CSV = "failures.csv"
FIGURES = "figures"


def _write_csv(df: pd.DataFrame, path: Path) -> None:
    atomic_write(path, lambda tmp: df.to_csv(tmp, index=False))


def write_tables(df: pd.DataFrame, failures: pd.DataFrame, sweep_dir: Path) -> list[Path]:
    """aggregate.parquet, aggregate.csv and failures.csv (removed when no run failed)."""
    sweep_dir = Path(sweep_dir)
    written = [sweep_dir / AGGREGATE_PARQUET, sweep_dir / AGGREGATE_CSV]
    write_parquet(df, written[0])
    _write_csv(df, written[1])
    if len(failures):
        written.append(sweep_dir / FAILURES_CSV)
        _write_csv(failures, written[-1])
    else:
        (sweep_dir / FAILURES_CSV).unlink(missing_ok=True)
    return written


def write_figures(df: pd.DataFrame, sweep_dir: Path, threshold: float | None = None) -> list[Path]:
    """The figures the runs support, under sweep_dir/figures; stale ones of ours removed."""
    from pagedbench.results.report.plots import FIGURE_NAMES, plot_all   # matplotlib loads only when drawing

    figures_dir = Path(sweep_dir) / FIGURES
    kwargs = {} if threshold is None else {"threshold": threshold}
    written = plot_all(df, figures_dir, **kwargs)
    for name in FIGURE_NAMES:
        if figures_dir / name not in written:
            (figures_dir / name).unlink(missing_ok=True)
    return written


def write_aggregate(sweep_dir: str | Path, threshold: float | None = None) -> Path:
    """Write the tables and figures of `sweep_dir` from its run folders; returns aggregate.parquet's path."""
    sweep_dir = Path(sweep_dir)
    df = collect(sweep_dir)
    note = mixed_code_note(df)
    if note:
        log.warning("%s: %s", sweep_dir, note)
    write_tables(df, collect_failures(sweep_dir), sweep_dir)
    write_figures(df, sweep_dir, threshold)
    return sweep_dir / AGGREGATE_PARQUET


def _missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _fmt(value, spec: str, scale: float = 1.0, missing: str = "n/a") -> str:
    return missing if _missing(value) else format(float(value) * scale, spec)


def format_table(df: pd.DataFrame) -> str:
    """The compact table: one line per run."""
    def col(name):
        return df[name] if name in df else pd.Series([None] * len(df), index=df.index, dtype=object)

    show = pd.DataFrame({
        "engine": col("engine"),
        "workload": col("workload"),
        **({"model": col("model")} if "model" in df and df["model"].nunique() > 1 else {}),
        "rate": [_fmt(r, "g", missing="offline") for r in col("request_rate")],
        "block": [_fmt(b, ".0f", missing="-") for b in col("block_size")],
        "req/s": [_fmt(v, ".3f") for v in col("requests_per_s")],
        "out tok/s": [_fmt(v, ".1f") for v in col("output_tokens_per_s")],
        "batch": [_fmt(v, ".2f") for v in col("mean_batch_size")],
        "token st. %": [_fmt(v, ".1f", 100) for v in col("mem_token_states")],
        "norm lat s/tok": [_fmt(v, ".4f") for v in col("norm_latency_s_mean")],
    })
    return show.to_string(index=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.results.report.aggregate", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dirs", nargs="+", type=Path, metavar="SWEEP_DIR")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help=f"normalized latency (s/token) an engine sustains (default {DEFAULT_THRESHOLD})")
    args = parser.parse_args(argv)
    for sweep_dir in args.sweep_dirs:
        problem = check_sweep_dir(sweep_dir)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
    for sweep_dir in args.sweep_dirs:
        df, failures = collect(sweep_dir), collect_failures(sweep_dir)
        print(f"{sweep_dir}: {len(df)} finished runs, {len(failures)} failed")
        note = mixed_code_note(df)
        if note:
            print(f"warning: {note}", file=sys.stderr)
        print(format_table(df))
        for row in failures.itertuples():
            error = row.error if len(row.error) <= 120 else row.error[:117] + "..."
            print(f"  failed: {row.run_dir}: {error}")
        rates = sustainable_rates(df, args.threshold)
        if len(rates) and (rates["num_rates"] > 1).any():
            print(f"sustainable request rate (mean normalized latency <= {args.threshold:g} s/token):")
            print(format_rates(rates))
            table = ratios(rates)
            if len(table):
                print(format_ratios(table))
        written = write_tables(df, failures, sweep_dir) + write_figures(df, sweep_dir, args.threshold)
        print("wrote:")
        for path in written:
            print(f"  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
