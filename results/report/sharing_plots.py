"""The sharing and swapping figures (the paper's Figures 14-17 and 19), drawn from capacity tables and aggregates.

- `plot_sampling`: Figure 14, parallel sampling (experiment `sampling`): each engine's capacity per setting, and
  the paged engine's memory saving beside the paper's.
- `plot_beam`: Figure 15, beam search (`beam`): the same.
- `plot_sharegpt_saving`: Figures 14-15 on ShareGPT (`saving`): the paged engine's capacity and its saving beside
  the paper's ranges.
- `plot_prefix`: Figure 16, shared prefix (`prefix`): capacity per engine and prefix, the paper's paged / Orca
  (Oracle) ratio under each group.
- `plot_chat`: Figure 17, chatbot (`chat`): capacity per engine.
- `plot_swap_cost`: Figure 19a, the sim's swap and recompute time against block size (from the presets).
- `plot_swap_block_size`: Figure 19b, capacity (`swap_capacity`) and, when run, normalized latency (`swap`)
  against block size, preempting by swap and by recompute.

A capacity is the mean over seeds of the highest rate that met the criterion (latency by default; the
`criterion` column of `capacity.csv`), with the per-seed min-max as its error bar or band; a hatched bar has a
seed whose search only bounded its capacity. Each `plot_*` writes a PNG and returns its path, or None when its
table has nothing to draw; each `*_figure` builds the figure without saving it. The titles, which name the paper's
figure each one redraws, are data: docs/report/sharing_figures.yaml (`figure_title`).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
import functools
from pathlib import Path
import re

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch
import yaml

from pagedbench.engines import registry
from pagedbench.engines.sim.swap_cost import swap_costs
from pagedbench.engines.specs.presets import load_hardware, load_model
from pagedbench.paths import REPORT_SOURCES
from pagedbench.results.report.paper import paper
from pagedbench.results.report.plots import engines_in, legend_outside, panel_grid, save_figure, steady
from pagedbench.results.sweeps.capacity import combined_bound

PREEMPTION_COLORS = {"swap": "#1f77b4", "recompute": "#d62728"}
PaperSaving = Mapping[str, float | tuple[float, float]]   # setting -> saving %, or its (low, high) range
TITLES = REPORT_SOURCES / "sharing_figures.yaml"          # each figure's title: the paper's figure it redraws


@functools.cache
def _titles() -> dict[str, str]:
    return {str(k): str(v) for k, v in yaml.safe_load(TITLES.read_text()).items()}


def figure_title(figure: str, **values) -> str:
    """The title of `figure` (a key of docs/report/sharing_figures.yaml), its fields filled with `values`."""
    return _titles()[figure].format(**values)


def setting(workload: str) -> str:
    """"alpaca_synthetic_beam4" -> "beam4"; "..._n2" -> "n2"; "translation_5shot" -> "5shot"; else "n1"."""
    match = re.search(r"_(n\d+|beam\d+|\d+shot)$", str(workload))
    return match.group(1) if match else "n1"


def criterion_rows(cap: pd.DataFrame | None, criterion: str) -> pd.DataFrame:
    """The rows of `criterion` ("latency", "goodput") with a capacity; none without a table."""
    if cap is None or not len(cap) or "criterion" not in cap:
        return pd.DataFrame(columns=["engine", "workload", "seed", "capacity", "bound"])
    rows = cap[cap["criterion"].astype(str).str.startswith(criterion) & cap["capacity"].notna()]
    return rows.assign(bound=rows["bound"].fillna("=") if "bound" in rows else "=")


def seed_spread(rows: pd.DataFrame, keys: list[str], column: str = "capacity", scale: float = 1.0) -> pd.DataFrame:
    """Per `keys` (in the table's order): mean, min and max of `column` x scale over seeds, and the bound."""
    values = rows.assign(value=pd.to_numeric(rows[column], errors="coerce") * scale)
    out = values.groupby(keys, sort=False).agg(mean=("value", "mean"), low=("value", "min"), high=("value", "max"))
    if "bound" in rows:
        out["bound"] = rows.groupby(keys, sort=False)["bound"].agg(combined_bound)
    return out.reset_index()


def oracle_ratio(rows: pd.DataFrame) -> float:
    """Paged / Orca (Oracle) capacity: the mean of the per-seed ratios (NaN without both)."""
    seeds = rows.pivot_table(index="seed", columns="engine", values="capacity", aggfunc="mean")
    oracle = registry.label("orca_oracle")
    if not {"paged", oracle} <= set(seeds):
        return float("nan")
    return float((seeds["paged"] / seeds[oracle]).mean())


def draw_capacity(ax, rows: pd.DataFrame, paper_ratio: Mapping[str, float] | None,
                  label: Callable[[str], str] = setting) -> None:
    """Grouped bars: x a setting (`label` of the workload), a bar per engine (mean over seeds, min-max error bar,
    value above); under each group its paged / Orca (Oracle) ratio, and the paper's beside it when given."""
    rows = rows.assign(setting=rows["workload"].map(label))
    stats = seed_spread(rows, ["setting", "engine"])
    names = list(dict.fromkeys(stats["setting"]))
    engines = engines_in(stats)
    width = 0.8 / len(engines)
    x = np.arange(len(names))
    for i, engine in enumerate(engines):
        mine = stats[stats["engine"] == engine].set_index("setting").reindex(names)
        error = np.vstack([mine["mean"] - mine["low"], mine["high"] - mine["mean"]])
        bars = ax.bar(x + (i - (len(engines) - 1) / 2) * width, mine["mean"], width, yerr=error, capsize=2,
                      color=registry.color(engine), label=engine, error_kw={"linewidth": 0.8})
        for bar, bound in zip(bars, mine["bound"]):
            if isinstance(bound, str) and bound != "=":
                bar.set_hatch("///")
        ax.bar_label(bars, labels=["" if np.isnan(v) else f"{v:.3g}" for v in mine["mean"]], fontsize=5.5,
                     padding=1)
    ticks = []
    for name in names:
        ratio = oracle_ratio(rows[rows["setting"] == name])
        tick = name if np.isnan(ratio) else f"{name}\npaged/oracle {ratio:.2f}x"
        if paper_ratio and name in paper_ratio:
            tick += f"\n(paper {paper_ratio[name]:g}x)"
        ticks.append(tick)
    ax.set_xticks(x, ticks, fontsize=7)
    ax.set_ylabel(f"capacity (req/s) at {rows['criterion'].iloc[0]}" if "criterion" in rows else "capacity (req/s)")
    ax.margins(y=0.1)
    ax.grid(axis="y", alpha=0.3)


def draw_saving(ax, rows: pd.DataFrame, paper_saving: PaperSaving) -> list[Patch]:
    """Per setting that shares memory (a saving here or in the paper), the paged engine's memory saving in its run
    at capacity (mean over seeds, min-max error bar) beside the paper's: a bar, or a dotted span for a range.
    Returns the legend's keys for the paper's bars."""
    paged = rows[rows["engine"] == "paged"].assign(setting=lambda r: r["workload"].map(setting))
    stats = seed_spread(paged, ["setting"], "memory_saving_at_capacity", 100.0)
    stats = stats[(stats["high"] > 0) | stats["setting"].isin(list(paper_saving))]
    names = list(stats["setting"])
    x = np.arange(len(names))
    error = np.vstack([stats["mean"] - stats["low"], stats["high"] - stats["mean"]])
    bars = ax.bar(x - 0.2, stats["mean"], 0.4, yerr=error, capsize=2, color=registry.color("paged"), label="paged",
                  error_kw={"linewidth": 0.8})
    ax.bar_label(bars, labels=[f"{v:.1f}" for v in stats["mean"]], fontsize=6, padding=1)
    keys = {}
    for xi, name in zip(x, names):
        value = paper_saving.get(name)
        if value is None:
            continue
        span = isinstance(value, tuple)
        low, high = value if span else (0.0, value)
        style = {"facecolor": "#bbbbbb", "edgecolor": "#555555", "hatch": "..." if span else None}
        ax.bar(xi + 0.2, high - low, 0.4, bottom=low, linewidth=0.5, **style)
        ax.text(xi + 0.2, high, f"{low:g}-{high:g}" if span else f"{high:g}", ha="center", va="bottom", fontsize=6)
        keys[span] = Patch(label="paper's range" if span else "paper", **style)
    ax.set_xticks(x, names, fontsize=7)
    ax.set_ylabel("KV memory saving (%)")
    ax.margins(y=0.1)
    ax.grid(axis="y", alpha=0.3)
    return list(keys.values())


def capacity_figure(cap: pd.DataFrame | None, title: str, paper_saving: PaperSaving | None = None,
                    paper_ratio: Mapping[str, float] | None = None, criterion: str = "latency",
                    label: Callable[[str], str] = setting) -> Figure | None:
    """Capacity per engine and setting (`label` of the workload; `draw_capacity`), and with `paper_saving` the
    paged engine's memory saving beside the paper's (`draw_saving`); None without a capacity under `criterion`."""
    rows = criterion_rows(cap, criterion)
    if not len(rows):
        return None
    n_settings, n_engines = rows["workload"].nunique(), rows["engine"].nunique()
    widths = [max(3.6, 0.32 * n_settings * (n_engines + 1) + 1.2)]
    with_saving = paper_saving is not None and "memory_saving_at_capacity" in rows and (rows["engine"] == "paged").any()
    if with_saving:
        widths.append(0.7 * n_settings + 1.6)
    fig, axes = panel_grid(len(widths), 0, 3.6, widths=widths)
    draw_capacity(axes[0], rows, paper_ratio, label)
    axes[0].set_title("capacity: mean over seeds, min-max bars", fontsize=8)
    extra = []
    if with_saving:
        extra = draw_saving(axes[1], rows, paper_saving)
        axes[1].set_title("paged engine's KV saving at its capacity", fontsize=8)
    if rows["bound"].ne("=").any():
        extra.append(Patch(facecolor="white", edgecolor="black", hatch="///", label="a seed's capacity is a bound"))
    model = f" | {rows['model'].iloc[0]}" if "model" in rows and rows["model"].notna().any() else ""
    fig.suptitle(title + model, fontsize=10)
    legend_outside(fig, axes, extra)
    return fig


def _plot(fig: Figure | None, out: Path) -> Path | None:
    return None if fig is None else save_figure(fig, out)


def plot_sampling(cap: pd.DataFrame | None, out: Path) -> Path | None:
    """Figure 14 from sampling/capacity.csv: capacity per engine and n, and the paged saving beside the paper's."""
    return _plot(capacity_figure(cap, figure_title("sampling"), paper().saving_alpaca), out)


def plot_beam(cap: pd.DataFrame | None, out: Path) -> Path | None:
    """Figure 15 from beam/capacity.csv: capacity per engine and beam width, and the paged saving beside the
    paper's."""
    return _plot(capacity_figure(cap, figure_title("beam"), paper().saving_alpaca), out)


def plot_sharegpt_saving(cap: pd.DataFrame | None, out: Path) -> Path | None:
    """Figures 14-15 on ShareGPT from saving/capacity.csv: the paged engine's capacity per setting, and its
    saving beside the paper's range (over n, or over widths)."""
    ranges = {key: tuple(float(v) for v in text.split("-")) for key, text in paper().saving_sharegpt.items()}
    rows = criterion_rows(cap, "latency")
    names = {setting(w) for w in rows["workload"]}
    paper_saving = {name: ranges["beam" if name.startswith("beam") else "n"] for name in names if name != "n1"}
    return _plot(capacity_figure(cap, figure_title("saving"), paper_saving), out)


def plot_prefix(cap: pd.DataFrame | None, out: Path) -> Path | None:
    """Figure 16 from prefix/capacity.csv: capacity per engine and prefix (1-shot, 5-shot)."""
    ratios = {f"{shots}shot": ratio for shots, ratio in paper().prefix_ratio.items()}
    return _plot(capacity_figure(cap, figure_title("prefix"), paper_ratio=ratios), out)


def plot_chat(cap: pd.DataFrame | None, out: Path) -> Path | None:
    """Figure 17 from chat/capacity.csv: capacity per engine (the paper: paged 2x every Orca variant)."""
    return _plot(capacity_figure(cap, figure_title("chat"), label=str), out)


# --- Figure 19 --------------------------------------------------------------------------------------------

def swap_cost_figure(model: str = "opt-13b", hardware: str = "a100-40gb", tokens: int = 1024) -> Figure:
    """Figure 19a: the sim's time to swap `tokens` tokens' KV one way, and to recompute them, against block size."""
    costs = pd.DataFrame(swap_costs(load_model(model), load_hardware(hardware), tokens))
    fig, (ax,) = panel_grid(1, 4.6, 3.4)
    ax.plot(costs["block_size"], costs["swap_one_way_ms"], marker="o", markersize=3.5,
            color=PREEMPTION_COLORS["swap"], label="swap out, or in (each way)")
    ax.plot(costs["block_size"], costs["recompute_ms"], marker="s", markersize=3.5,
            color=PREEMPTION_COLORS["recompute"], label="recompute (a prefill)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(costs["block_size"], [str(int(b)) for b in costs["block_size"]])
    times = costs[["swap_one_way_ms", "recompute_ms"]].to_numpy()
    low, high = times.min(), times.max()
    ticks = [m * 10.0 ** e for e in range(-2, 6) for m in (1, 2, 5) if low / 2 <= m * 10.0 ** e <= 2 * high]
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("block size (tokens)")
    ax.set_ylabel("time (ms, log scale)")
    ax.grid(alpha=0.3, which="both")
    ax.set_title(figure_title("swap_cost", tokens=tokens, model=model, hardware=hardware), fontsize=9)
    legend_outside(fig, [ax])
    return fig


def plot_swap_cost(out: Path, model: str = "opt-13b", hardware: str = "a100-40gb", tokens: int = 1024) -> Path:
    """Figure 19a (log-log) from the presets; needs no runs."""
    return save_figure(swap_cost_figure(model, hardware, tokens), out)


def draw_by_block(ax, stats: pd.DataFrame) -> None:
    """Per preemption policy, its mean against block size (log2 axis) and the min-max over seeds as a band."""
    for policy, mine in stats.groupby("preemption", sort=True):
        mine = mine.sort_values("block_size")
        color = PREEMPTION_COLORS.get(policy, "#7f7f7f")
        ax.plot(mine["block_size"], mine["mean"], marker="o", markersize=3.5, color=color, label=policy)
        ax.fill_between(mine["block_size"], mine["low"], mine["high"], color=color, alpha=0.2, linewidth=0)
    blocks = sorted(stats["block_size"].unique())
    ax.set_xscale("log", base=2)
    ax.set_xticks(blocks, [str(int(b)) for b in blocks])
    ax.minorticks_off()
    ax.set_xlabel("block size (tokens)")
    ax.grid(alpha=0.3)


def swap_block_size_figure(cap: pd.DataFrame | None, agg: pd.DataFrame | None = None,
                           criterion: str = "latency") -> Figure | None:
    """Figure 19b: capacity (swap_capacity/capacity.csv) and steady-window mean normalized latency (the `swap`
    aggregate, each block size at its own request rate, printed under it) against block size, swap against
    recompute; a panel for each table given. None when neither has a run with a block size and a policy."""
    rows = criterion_rows(cap, criterion)
    if {"block_size", "preemption"} <= set(rows):
        rows = rows[rows["block_size"].notna() & rows["preemption"].notna()]
    else:
        rows = rows.iloc[0:0]
    runs = pd.DataFrame() if agg is None else agg
    if len(runs) and {"block_size", "preemption"} <= set(runs):
        runs = runs[runs["block_size"].notna() & runs["preemption"].notna()]
        runs = runs.assign(latency=steady(runs, "norm_latency_s_mean"))
        runs = runs[runs["latency"].notna()]
    else:
        runs = pd.DataFrame()
    panels = [p for p, present in (("capacity", len(rows)), ("latency", len(runs))) if present]
    if not panels:
        return None
    fig, axes = panel_grid(len(panels), 4.8, 3.6)
    for ax, panel in zip(axes, panels):
        if panel == "capacity":
            draw_by_block(ax, seed_spread(rows, ["block_size", "preemption"]))
            ax.set_ylabel(f"capacity (req/s) at {rows['criterion'].iloc[0]}")
            ax.set_title("paged capacity: mean over seeds, min-max band", fontsize=8)
        else:
            draw_by_block(ax, seed_spread(runs, ["block_size", "preemption"], "latency"))
            ax.set_ylabel("normalized latency (s/token)")
            ax.set_title("steady-window mean normalized latency", fontsize=8)
            if "request_rate" in runs:
                rates = runs.groupby("block_size")["request_rate"].agg(lambda r: "/".join(f"{v:g}" for v in
                                                                                        sorted(set(r))))
                ax.set_xticks(list(rates.index), [f"{int(b)}\n{r}" for b, r in rates.items()], fontsize=7)
                ax.set_xlabel("block size (tokens)\nrequest rate (req/s)")
        ax.set_ylim(bottom=0)
    fig.suptitle(figure_title("swap_block_size"), fontsize=10)
    legend_outside(fig, axes)
    return fig


def plot_swap_block_size(cap: pd.DataFrame | None, agg: pd.DataFrame | None, out: Path) -> Path | None:
    """Figure 19b from swap_capacity/capacity.csv and the `swap` experiment's aggregate (either may be None)."""
    return _plot(swap_block_size_figure(cap, agg), out)
