"""TTFT and TPOT distributions per engine at one request rate, from run folders (the report's latency
distributions): each run's finished requests that arrived in its steady window, an engine's seeds pooled."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter
import pandas as pd

from pagedbench.engines import registry
from pagedbench.results.record.store import read_summary
from pagedbench.results.record.summary import request_latencies
from pagedbench.results.report.plots import legend_outside, numeric, panel_grid, rate_label, save_figure
from pagedbench.results.report.read import read_parquet


def runs_at_rate(folder: Path, df: pd.DataFrame, rate: float, workload: str | None = None) -> list[Path]:
    """The run folders (under `folder`, the sweep's) of the table's runs at `rate` (and `workload`)."""
    rows = df[(numeric(df, "request_rate") == rate) & ((df["workload"] == workload) if workload else True)]
    return [Path(folder) / d for d in rows["run_dir"]]


def shared_rates(df: pd.DataFrame) -> list[float]:
    """The request rates at which every engine of the table has a run (some seed's)."""
    rates = [set(numeric(g, "request_rate").dropna()) for _, g in df.groupby("engine")]
    return sorted(set.intersection(*rates)) if rates else []


def steady_latencies(run_dir: Path) -> tuple[dict, pd.DataFrame]:
    """A run's summary and the `request_latencies` of its finished requests that arrived in the steady window
    (the requests its `steady_*` latency figures count; all finished requests without a window)."""
    summary = read_summary(run_dir)
    requests = read_parquet(Path(run_dir) / "requests.parquet")
    keep = requests["status"] == "finished"
    start, end = summary.get("window_start_s"), summary.get("window_end_s")
    if start is not None and end is not None and end > start:
        keep &= requests["arrival_s"].between(start, end)
    return summary, request_latencies(requests[keep])


def latency_distribution_figure(run_dirs: Sequence[Path]) -> Figure | None:
    """The figure of `plot_latency_distributions`, not saved; None without a finished request."""
    pooled: dict[tuple, list[pd.DataFrame]] = {}
    rates, workloads, seeds_of = set(), set(), {}
    for run_dir in run_dirs:
        summary, lat = steady_latencies(run_dir)
        key = (summary["engine"], summary.get("block_size"))
        pooled.setdefault(key, []).append(lat)
        seeds_of.setdefault(key, set()).add(summary.get("workload_seed"))
        rates.add(summary.get("request_rate"))
        workloads.add(summary.get("workload"))
    if len(rates) > 1:
        raise ValueError(f"the runs are at different request rates {sorted(rates, key=str)}: pass runs at one rate")
    pooled = {k: pd.concat(v) for k, v in pooled.items()}
    pooled = {k: v for k, v in pooled.items() if len(v)}
    if not pooled:
        return None
    keys = sorted(pooled, key=lambda k: (registry.rank(k[0]), k[0], k[1] or 0))
    blocks = {e: [b for k, b in keys if k == e] for e, _ in keys}   # an engine at several block sizes: a style each
    fig, axes = panel_grid(2, 4.6, 3.4)
    for ax, column, label in zip(axes, ("ttft_s", "tpot_s"), ("TTFT (s)", "TPOT (s/token)")):
        drawn = []
        for engine, block in keys:
            values = pooled[(engine, block)][column].dropna()   # TPOT is NaN for a one-token output
            if not len(values):
                continue
            mine = blocks[engine]
            name = f"{engine} (block {block})" if len(mine) > 1 else engine
            n_seeds = len(seeds_of[(engine, block)])
            ax.ecdf(values, color=registry.color(engine), linestyle=("-", "--", ":", "-.")[mine.index(block) % 4],
                    label=f"{name}: {len(values):,} requests" + (f", {n_seeds} seeds" if n_seeds > 1 else ""))
            drawn.append(values)
        spread = pd.concat(drawn) if drawn else pd.Series(dtype=float)
        if len(spread) and spread.min() > 0 and spread.max() > 20 * spread.min():   # over a decade: log axis
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        else:
            ax.locator_params(axis="x", nbins=5)
        ax.set_xlabel(label + (", log scale" if ax.get_xscale() == "log" else ""))
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    rate = rates.pop()
    rate = rate_label(math.nan if rate is None else float(rate))
    fig.suptitle(f"{' | '.join(sorted(map(str, workloads)))} | {rate}: TTFT and TPOT of the finished requests "
                 "that arrived in the steady window", fontsize=9)
    legend_outside(fig, axes)
    return fig


def plot_latency_distributions(run_dirs: Sequence[Path], path: Path) -> Path | None:
    """TTFT and TPOT CDFs per engine (x on a log scale where it spans over a decade), from run folders of one
    request rate (named in the title; runs at different rates raise ValueError); an engine's seeds are pooled.
    None without a finished request."""
    fig = latency_distribution_figure(run_dirs)
    return None if fig is None else save_figure(fig, path)
