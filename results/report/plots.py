"""The paper's figures, drawn from an aggregate table (one row per run).

- `plot_memory_waste`: Figure 2, the KV budget split per engine.
- `plot_latency_vs_rate`: Figure 12, mean normalized latency vs request rate, one thin line per seed.
- `plot_batch_size`: Figure 13, mean batch size per engine and request rate.
- `plot_block_size`: Figure 18b, the paged engine across block sizes.
- `plot_latency_distributions`: TTFT and TPOT CDFs per engine, from run folders at one request rate.
- `plot_all`: whichever of Figures 2-18b the runs support.

Every figure has one panel per setting (workload, and model, backend,
hardware or experiment when the table holds several). Figures 2, 12 and 13
show the paged engine at block size 16, the paper's default, when the table
has it (else at its smallest block size); runs repeated at one point are
averaged, runs of different seeds are not. Legends sit outside the panels.
PNGs are written atomically.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure   # noqa: E402  (after choosing the backend)
from matplotlib.lines import Line2D   # noqa: E402
from matplotlib.patches import Patch   # noqa: E402
import matplotlib.pyplot as plt   # noqa: E402
import numpy as np   # noqa: E402
import pandas as pd   # noqa: E402

from pagedbench.engines import registry   # noqa: E402
from pagedbench.results.record.store import atomic_write   # noqa: E402
from pagedbench.results.sweeps.sustainable import DEFAULT_THRESHOLD   # noqa: E402

# Colours of the KV split, apart from the engines' colours (`registry.color`).
MEMORY_PARTS = (("token_states", "token states", "#2ca02c"), ("reservation", "reservation", "#98df8a"),
                ("internal_fragmentation", "internal frag.", "#8c564b"),
                ("external_fragmentation", "external frag. & others", "#e377c2"), ("free", "free", "#e0e0e0"))
SETTING_COLUMNS = ("workload", "model", "backend", "hardware", "device", "experiment")
SEED_COLUMNS = ("workload_seed", "seed")   # an aggregate's, then a capacity table's
DEFAULT_BLOCK_SIZE = 16
FIGURE_NAMES = ("memory_waste.png", "memory_waste_while_waiting.png", "latency_vs_rate.png",
                "batch_size.png", "block_size.png")
DPI = 150


def numeric(df: pd.DataFrame, column: str) -> pd.Series:
    if column not in df:
        return pd.Series(math.nan, index=df.index)
    return pd.to_numeric(df[column], errors="coerce").astype(float)


def steady(df: pd.DataFrame, column: str) -> pd.Series:
    """A figure over the steady window (`steady_<column>`) where the runs have it, else over the whole run."""
    window = numeric(df, f"steady_{column}")
    return window.where(window.notna(), numeric(df, column)) if f"steady_{column}" in df else numeric(df, column)


def _with_keys(df: pd.DataFrame) -> pd.DataFrame:
    """df with float `rate` (NaN offline) and `block` (NaN when the engine has none)."""
    return df.assign(rate=numeric(df, "request_rate"), block=numeric(df, "block_size")).copy()   # consolidated


def setting_columns(df: pd.DataFrame) -> list[str]:
    """workload, then each other setting column that varies across the table."""
    return [c for c in SETTING_COLUMNS if c in df and (c == "workload" or df[c].nunique(dropna=False) > 1)]


def settings(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(panel title, rows) per setting, sorted by setting."""
    cols = setting_columns(df)
    if not cols:
        return [("all runs", df)]
    out = []
    for key, rows in df.groupby(cols, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        title = " | ".join(str(v) for v in key if not (isinstance(v, float) and math.isnan(v)))
        if "model" not in cols and "model" in df and df["model"].notna().any():
            title += f" | {rows['model'].iloc[0]}"
        out.append((title, rows))
    return out


def default_block(df: pd.DataFrame) -> pd.DataFrame:
    """Paged rows at block size 16 if present, else at the smallest; other engines untouched."""
    df = _with_keys(df)
    paged = df["engine"] == "paged"
    blocks = df.loc[paged, "block"].dropna()
    if blocks.nunique() <= 1:
        return df
    keep = DEFAULT_BLOCK_SIZE if (blocks == DEFAULT_BLOCK_SIZE).any() else blocks.min()
    return df[~paged | (df["block"] == keep)]


def engines_in(df: pd.DataFrame) -> list[str]:
    return sorted(df["engine"].dropna().unique(), key=lambda e: (registry.rank(e), e))


def engine_label(df: pd.DataFrame, engine: str) -> str:
    """The engine's name, with its block size when it has exactly one in `df` ("paged (block 16)")."""
    blocks = df.loc[df["engine"] == engine, "block"].dropna().unique()
    return f"{engine} (block {int(blocks[0])})" if len(blocks) == 1 else engine


def rate_label(rate: float) -> str:
    return "offline" if math.isnan(rate) else f"{rate:g} req/s"


def panel_grid(n: int, width: float, height: float, max_cols: int = 3, widths: Sequence[float] | None = None):
    """A figure of n panels of width x height inches, at most max_cols a row; or one row of panels `widths`
    inches wide."""
    if widths is not None:
        fig, axes = plt.subplots(1, len(widths), figsize=(sum(widths), height), width_ratios=widths, squeeze=False)
        return fig, list(axes.flat)
    cols = min(n, max_cols)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def legend_outside(fig: Figure, axes, extra: Sequence = ()) -> None:
    """One legend for the figure, right of its panels: each label drawn in `axes` once, then `extra` handles."""
    handles = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    for handle in extra:
        handles.setdefault(handle.get_label(), handle)
    if handles:
        fig.legend(list(handles.values()), list(handles.keys()), loc="center left", bbox_to_anchor=(1.0, 0.5),
                   fontsize=7, frameon=False)


def save_figure(fig: Figure, path: Path) -> Path:
    path = Path(path)
    try:
        fig.tight_layout()
        atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=DPI, bbox_inches="tight"))
    finally:
        plt.close(fig)
    return path


def _require(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(f"the table cannot support this figure: {what}")


# --- Figure 2 ---------------------------------------------------------------------------------------------

def memory_rows(df: pd.DataFrame, prefix: str = "mem") -> pd.DataFrame:
    """Rows with a complete KV split under `prefix`."""
    cols = [f"{prefix}_{part}" for part, _, _ in MEMORY_PARTS]
    if not len(df) or any(c not in df for c in cols):
        return df.iloc[0:0]
    return df[df[cols].apply(pd.to_numeric, errors="coerce").notna().all(axis=1)]


def plot_memory_waste(df: pd.DataFrame, path: Path, prefix: str = "mem", rate: float | None = None) -> Path:
    """Figure 2: per engine, one bar of the KV budget split into token states, reservation,
    internal frag., external frag. & others and free (% of the budget, averaged over the run,
    or over the iterations during which a request waited with prefix="mem_waiting").

    One panel per setting, at one arrival setting: `rate` if given, else offline if the panel
    has offline runs, else its highest request rate (memory binds most there). With
    prefix="mem_waiting", an engine whose runs there never made a request wait has no bar.
    """
    rows = memory_rows(default_block(df), prefix)
    _require(len(rows) > 0, f"no run with {prefix}_* columns")
    panels = settings(rows)
    fig, axes = panel_grid(len(panels), 6.4, 0.55 * max(len(engines_in(rows)), 2) + 1.4)
    for ax, (title, panel) in zip(axes, panels):
        if rate is not None:
            chosen = panel[panel["rate"] == rate]
        elif panel["rate"].isna().any():
            chosen = panel[panel["rate"].isna()]
        else:
            chosen = panel[panel["rate"] == panel["rate"].max()]
        if not len(chosen):
            ax.set_visible(False)
            continue
        engines = engines_in(chosen)
        y = np.arange(len(engines))[::-1]
        split = {part: [100 * numeric(chosen[chosen["engine"] == e], f"{prefix}_{part}").mean() for e in engines]
                 for part, _, _ in MEMORY_PARTS}
        left = np.zeros(len(engines))
        for part, label, color in MEMORY_PARTS:
            ax.barh(y, split[part], left=left, color=color, label=label, edgecolor="white", linewidth=0.5)
            left += np.array(split[part])
        for yi, share in zip(y, split["token_states"]):
            inside = share >= 12
            ax.text(share / 2 if inside else share + 1, yi, f"{share:.1f}%", va="center",
                    ha="center" if inside else "left", fontsize=8, color="white" if inside else "black",
                    bbox=None if inside else {"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none"})
        ax.set_yticks(y, [engine_label(chosen, e) for e in engines])
        for tick, engine in zip(ax.get_yticklabels(), engines):
            tick.set_color(registry.color(engine))
        ax.set_xlim(0, 100)
        ax.set_xlabel("% of the KV budget")
        when = {"mem": "over the run", "mem_waiting": "while requests wait",
                "steady_mem": "over the steady window"}.get(prefix, prefix)
        ax.set_title(f"{title} | {rate_label(chosen['rate'].iloc[0])}\nKV memory {when}", fontsize=9)
    fig.legend(handles=[Patch(color=color, label=label) for _, label, color in MEMORY_PARTS],
               loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=5, fontsize=7, frameon=False)
    return save_figure(fig, path)


# --- Figure 12 --------------------------------------------------------------------------------------------

def seeds(df: pd.DataFrame) -> pd.Series:
    """Each run's workload seed (0 where the table has no seed column)."""
    for column in SEED_COLUMNS:
        if column in df:
            return df[column].fillna(0)
    return pd.Series(0, index=df.index)


def rate_curves(df: pd.DataFrame) -> pd.DataFrame:
    """Normalized latency (steady-window mean) and seed of each run at a finite request rate."""
    df = default_block(df)
    df = df[df["rate"].notna() & (df["rate"] < math.inf)]
    return df.assign(latency=steady(df, "norm_latency_s_mean"), seed=seeds(df))


def has_curve(curves: pd.DataFrame) -> bool:
    """Whether some engine has a latency at two or more request rates in one setting."""
    curves = curves[curves["latency"].notna()]
    if not len(curves):
        return False
    return bool(curves.groupby([*setting_columns(curves), "engine"], dropna=False)["rate"].nunique().max() >= 2)


def draw_seed_curves(ax, panel: pd.DataFrame, engine: str) -> None:
    """One thin line per seed (runs repeated at one seed and rate averaged), gid "seed:ENGINE:SEED"; with two or
    more seeds, their mean at the rates every seed ran, gid "mean:ENGINE". Different seeds' rates are never
    averaged together: a capacity search probes each seed at its own rates."""
    color, label = registry.color(engine), engine_label(panel, engine)
    mine = panel[(panel["engine"] == engine) & panel["latency"].notna()]
    by_seed = mine.groupby(["rate", "seed"])["latency"].mean().unstack("seed")   # [rates, seeds]
    single = by_seed.shape[1] == 1
    for seed in by_seed.columns:
        points = by_seed[seed].dropna()
        ax.plot(points.index, points.to_numpy(), color=color, marker="o", markersize=3.5 if single else 1.5,
                linewidth=1.4 if single else 0.6, alpha=1.0 if single else 0.45, gid=f"seed:{engine}:{seed}",
                label=label if single else None)
    shared = by_seed.dropna()
    if not single and len(shared):
        ax.plot(shared.index, shared.mean(axis=1).to_numpy(), color=color, marker="o", markersize=3.5,
                linewidth=1.6, gid=f"mean:{engine}", label=label)
    elif not single:   # no rate that every seed ran: the engine's legend entry alone
        ax.plot([], [], color=color, linewidth=1.6, label=label)


def latency_figure(df: pd.DataFrame, threshold: float = DEFAULT_THRESHOLD, y_max: float | None = None) -> Figure:
    """Figure 12's figure, not saved (see `plot_latency_vs_rate`)."""
    curves = rate_curves(df)
    _require(has_curve(curves), "needs an engine's runs at two or more finite request rates")
    panels = settings(curves)
    fig, axes = panel_grid(len(panels), 4.6, 3.6)
    for ax, (title, panel) in zip(axes, panels):
        top = y_max
        if top is None:
            highest = panel["latency"].max()
            top = 1.2 * threshold if not highest <= threshold else 1.1 * highest
        for engine in engines_in(panel):
            draw_seed_curves(ax, panel, engine)
        if threshold <= top:
            ax.axhline(threshold, color="black", linestyle="--", linewidth=0.8, gid="threshold")
        ax.set_ylim(0, top if top > 0 else 1)
        ax.set_xlim(left=0)
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel("normalized latency (s/token)")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    several = curves.groupby(["engine"])["seed"].nunique().max() > 1
    keys = [Line2D([], [], color="black", linestyle="--", linewidth=0.8, label=f"threshold {threshold:g} s/token")]
    if several:
        keys += [Line2D([], [], color="grey", linewidth=0.6, alpha=0.6, label="thin: one seed"),
                 Line2D([], [], color="grey", linewidth=1.6, marker="o", markersize=3.5,
                        label="thick: mean at rates\nevery seed ran")]
    legend_outside(fig, axes, keys)
    return fig


def plot_latency_vs_rate(df: pd.DataFrame, path: Path, threshold: float = DEFAULT_THRESHOLD,
                         y_max: float | None = None) -> Path:
    """Figure 12: normalized latency (s/token, steady-window mean) vs request rate (req/s), per engine one thin
    line per seed and, with several seeds, a thick line of their mean at the rates every seed ran.

    The y axis stops at `y_max` (default 1.2 x threshold once any point passes the threshold,
    as the paper's stops at 1 s/token), so a blow-up leaves the panel as a steep line; the
    threshold is drawn dashed.
    """
    return save_figure(latency_figure(df, threshold, y_max), path)


# --- Figure 13 --------------------------------------------------------------------------------------------

def plot_batch_size(df: pd.DataFrame, path: Path) -> Path:
    """Figure 13: mean decode batch size (over the steady window where the runs have it), one bar per engine,
    grouped by request rate, one panel per setting."""
    rows = default_block(df)
    rows = rows.assign(batch=steady(rows, "mean_batch_size"))
    rows = rows[rows["batch"].notna()]
    _require(len(rows) > 0, "no run with a mean_batch_size")
    panels = settings(rows)
    most = max(p["rate"].nunique(dropna=False) for _, p in panels)
    fig, axes = panel_grid(len(panels), max(4.0, 1.3 * most + 1.5), 3.4)
    for ax, (title, panel) in zip(axes, panels):
        rates = sorted(panel["rate"].unique(), key=lambda r: (math.isnan(r), r))
        engines = engines_in(panel)
        width = 0.8 / len(engines)
        for i, engine in enumerate(engines):
            mine = panel[panel["engine"] == engine]
            heights = [mine.loc[(mine["rate"] == r) | (mine["rate"].isna() & math.isnan(r)), "batch"].mean()
                       for r in rates]
            x = np.arange(len(rates)) + (i - (len(engines) - 1) / 2) * width
            bars = ax.bar(x, heights, width, color=registry.color(engine), label=engine_label(panel, engine))
            ax.bar_label(bars, labels=["" if math.isnan(h) else f"{h:.1f}" for h in heights], fontsize=6,
                         padding=1)
        ax.set_xticks(np.arange(len(rates)), [rate_label(r) for r in rates])
        ax.set_ylabel("mean batch size (requests)")
        ax.set_title(title, fontsize=9)
        ax.margins(y=0.12)
    legend_outside(fig, axes)
    return save_figure(fig, path)


# --- Figure 18b -------------------------------------------------------------------------------------------

def block_size_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Paged runs of every setting and rate measured at two or more block sizes."""
    if not len(df) or "engine" not in df:
        return df.iloc[0:0]
    paged = _with_keys(df[df["engine"] == "paged"])
    paged = paged[paged["block"].notna()]
    if not len(paged):
        return paged
    keys = setting_columns(paged) + ["rate"]
    sizes = paged.groupby(keys, dropna=False)["block"].transform("nunique")
    return paged[sizes >= 2]


BLOCK_METRICS = (("mean_batch_size", "mean batch size", 1.0), ("mem_token_states", "token states (% of KV)", 100.0),
                 ("norm_latency_s_mean", "normalized latency (s/token)", 1.0),
                 ("requests_per_s", "throughput (req/s)", 1.0))


def plot_block_size(df: pd.DataFrame, path: Path) -> Path:
    """Figure 18b: the paged engine vs block size (log2 axis): mean batch size, token-state %,
    mean normalized latency and throughput, one line per setting and request rate."""
    rows = block_size_rows(df)
    _require(len(rows) > 0, "needs paged runs at two or more block sizes")
    fig, axes = panel_grid(len(BLOCK_METRICS), 4.2, 3.2, max_cols=2)
    lines = [(title, rate, part) for title, panel in settings(rows)
             for rate, part in panel.groupby("rate", dropna=False, sort=True)]
    for ax, (column, label, scale) in zip(axes, BLOCK_METRICS):
        for i, (title, rate, part) in enumerate(lines):
            points = part.assign(value=steady(part, column) * scale).groupby("block")["value"].mean()
            ax.plot(points.index, points.to_numpy(), marker="o", markersize=3.5, color=f"C{i % 10}",
                    label=f"{title} | {rate_label(rate)}")
        blocks = sorted(rows["block"].unique())
        ax.set_xscale("log", base=2)
        ax.set_xticks(blocks, [str(int(b)) for b in blocks])
        ax.minorticks_off()
        ax.set_xlabel("block size (tokens)")
        ax.set_ylabel(label)
        highest = np.nanmax([line.get_ydata().max() for line in ax.get_lines()] + [0])
        ax.set_ylim(0, 1.1 * highest if highest > 0 else 1)
        ax.grid(alpha=0.3)
    legend_outside(fig, axes[:1])
    fig.suptitle("paged engine vs block size", fontsize=10)
    return save_figure(fig, path)


# --- all --------------------------------------------------------------------------------------------------

def plot_all(df: pd.DataFrame, figures_dir: Path, threshold: float = DEFAULT_THRESHOLD) -> list[Path]:
    """Draw into `figures_dir` each figure the table supports; returns the paths written."""
    figures_dir = Path(figures_dir)
    if not len(df) or "engine" not in df:
        return []
    written = []
    for prefix in ("steady_mem", "mem"):
        if len(memory_rows(default_block(df), prefix)):
            written.append(plot_memory_waste(df, figures_dir / "memory_waste.png", prefix=prefix))
            break
    if len(memory_rows(default_block(df), "mem_waiting")):
        written.append(plot_memory_waste(df, figures_dir / "memory_waste_while_waiting.png", prefix="mem_waiting"))
    if has_curve(rate_curves(df)):
        written.append(plot_latency_vs_rate(df, figures_dir / "latency_vs_rate.png", threshold))
    if numeric(df, "mean_batch_size").notna().any():
        written.append(plot_batch_size(df, figures_dir / "batch_size.png"))
    if len(block_size_rows(df)):
        written.append(plot_block_size(df, figures_dir / "block_size.png"))
    return written
