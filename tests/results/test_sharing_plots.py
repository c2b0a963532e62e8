"""The sharing and swapping figures, latency per seed and TTFT/TPOT distributions, on small hand-made tables:
each writes a PNG, draws nothing without data, draws what its table holds, and keeps its legend off the panels."""
import json

import numpy as np
import pandas as pd
import pytest

from pagedbench.results.report import distribution_plots, plots, sharing_plots
from pagedbench.results.report.distribution_plots import (latency_distribution_figure, plot_latency_distributions,
                                               runs_at_rate, shared_rates)
from pagedbench.results.report.plots import latency_figure, plot_batch_size, plot_block_size, plot_latency_vs_rate, plot_memory_waste
from pagedbench.results.report.sharing_plots import (capacity_figure, figure_title, oracle_ratio, plot_beam, plot_chat,
                                          plot_prefix, plot_sampling, plot_sharegpt_saving, plot_swap_block_size,
                                          plot_swap_cost, setting, seed_spread, swap_block_size_figure)
from tests.results.test_plots import is_png, sweep_table

BASELINES = ["orca-max", "orca-pow2", "orca-oracle"]
LATENCY = "latency<=0.2s/tok"
SEEDS = (0, 1, 2)


def capacity_table(workloads=("alpaca_synthetic", "alpaca_synthetic_n2", "alpaca_synthetic_n4"),
                   engines=(*BASELINES, "paged")) -> pd.DataFrame:
    """A capacity.csv: each engine, workload and seed under both criteria; the paged engine saves memory by n."""
    rows = []
    for w, workload in enumerate(workloads):
        for e, engine in enumerate(engines):
            for seed in SEEDS:
                for criterion, scale in ((LATENCY, 1.0), ("goodput>=90%", 0.7)):
                    rows.append({"engine": engine, "workload": workload, "model": "opt-13b", "seed": seed,
                                 "criterion": criterion, "capacity": scale * (e + 1) * (1 + 0.1 * seed) / (w + 1),
                                 "bound": "=", "block_size": 16 if engine == "paged" else None,
                                 "memory_saving_at_capacity": (0.03 * w * (1 + 0.1 * seed)
                                                               if engine == "paged" else 0.0)})
    return pd.DataFrame(rows)


def swap_capacity_table(blocks=(1, 4, 16, 64)) -> pd.DataFrame:
    rows = [{"engine": "paged", "workload": "sharegpt", "model": "opt-13b", "seed": seed, "criterion": LATENCY,
             "capacity": 4 - 2 / b - (0.3 if policy == "swap" and b < 8 else 0) + 0.1 * seed, "bound": "=",
             "block_size": b, "preemption": policy}
            for b in blocks for policy in ("swap", "recompute") for seed in SEEDS]
    return pd.DataFrame(rows)


def swap_aggregate(blocks=(1, 4, 16, 64)) -> pd.DataFrame:
    return pd.DataFrame([{"engine": "paged", "workload": "sharegpt", "block_size": b, "preemption": policy,
                          "request_rate": 2.0 + np.log2(b) / 4, "workload_seed": 0,
                          "steady_norm_latency_s_mean": 0.05 + (0.02 / b if policy == "swap" else 0.01)}
                         for b in blocks for policy in ("swap", "recompute")])


@pytest.fixture
def drawn(monkeypatch):
    """The figures the plot functions save, kept open for inspection (a list, filled as they save)."""
    figures = []
    save = plots.save_figure

    def keep(fig, path):
        figures.append(fig)
        return save(fig, path)
    monkeypatch.setattr(plots, "save_figure", keep)
    monkeypatch.setattr(sharing_plots, "save_figure", keep)
    monkeypatch.setattr(distribution_plots, "save_figure", keep)
    return figures


def legend_is_outside(fig) -> bool:
    """Whether the figure has a legend and every legend lies clear of every visible panel."""
    fig.tight_layout()
    fig.canvas.draw()
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    panels = [ax.get_window_extent() for ax in fig.axes if ax.get_visible()]
    return bool(legends) and all(not legend.get_window_extent().overlaps(panel)
                                 for legend in legends for panel in panels)


# --- Figures 14-17 ----------------------------------------------------------------------------------------

CAPACITY_PLOTS = [(plot_sampling, ("alpaca_synthetic", "alpaca_synthetic_n2", "alpaca_synthetic_n4")),
                  (plot_beam, ("alpaca_synthetic_beam2", "alpaca_synthetic_beam4")),
                  (plot_sharegpt_saving, ("sharegpt_n2", "sharegpt_beam4")),
                  (plot_prefix, ("translation_1shot", "translation_5shot")),
                  (plot_chat, ("sharegpt_chat",))]


@pytest.mark.parametrize("plot, workloads", CAPACITY_PLOTS, ids=lambda p: getattr(p, "__name__", ""))
def test_each_capacity_figure_writes_a_png(plot, workloads, tmp_path):
    engines = ("paged",) if plot is plot_sharegpt_saving else (*BASELINES, "paged")
    path = plot(capacity_table(workloads, engines), tmp_path / "figure.png")
    assert path == tmp_path / "figure.png" and is_png(path)
    assert [p.name for p in tmp_path.iterdir()] == ["figure.png"]


@pytest.mark.parametrize("plot", [p for p, _ in CAPACITY_PLOTS], ids=lambda p: p.__name__)
def test_capacity_figures_draw_nothing_without_a_latency_capacity(plot, tmp_path):
    cap = capacity_table()
    assert plot(None, tmp_path / "a.png") is None
    assert plot(cap.iloc[0:0], tmp_path / "b.png") is None
    assert plot(cap[cap["criterion"] != LATENCY], tmp_path / "c.png") is None
    assert list(tmp_path.iterdir()) == []


def test_capacity_bars_are_the_mean_over_seeds_with_the_min_max(drawn, tmp_path):
    cap = capacity_table()
    plot_sampling(cap, tmp_path / "f.png")
    capacity_ax, saving_ax = drawn[0].axes
    bars = capacity_ax.containers
    assert [b.get_label() for b in bars if b.get_label() in (*BASELINES, "paged")] == [*BASELINES, "paged"]
    paged = next(b for b in bars if b.get_label() == "paged")
    latency = cap[(cap["criterion"] == LATENCY) & (cap["engine"] == "paged")]
    assert [r.get_height() for r in paged.patches] == pytest.approx(latency.groupby("workload")["capacity"].mean()
                                                                   .reindex(cap["workload"].unique()).tolist())
    error = paged.errorbar.lines[2][0].get_segments()   # one vertical segment per bar: from min to max
    spans = latency.groupby("workload", sort=False)["capacity"].agg(["min", "max"]).to_numpy()
    assert np.allclose([[s[0][1], s[1][1]] for s in error], spans)
    # The saving panel: n1 saves nothing here nor in the paper and is left out; n2 and n4 beside the paper's.
    assert [t.get_text() for t in saving_ax.get_xticklabels()] == ["n2", "n4"]
    paper_heights = sorted(round(p.get_height(), 2) for p in saving_ax.patches if p.get_facecolor()[0] > 0.7)
    assert paper_heights == [6.09, 8.53]
    assert legend_is_outside(drawn[0])


def test_a_bound_is_hatched_and_named(tmp_path):
    cap = capacity_table()
    cap.loc[(cap["engine"] == "paged") & (cap["seed"] == 1), "bound"] = ">="
    fig = capacity_figure(cap, "t")
    paged = next(b for b in fig.axes[0].containers if b.get_label() == "paged")
    assert all(p.get_hatch() == "///" for p in paged.patches)
    assert "a seed's capacity is a bound" in [t.get_text() for t in fig.legends[0].get_texts()]


def test_groups_are_named_with_the_paged_over_oracle_ratio_and_the_papers(drawn, tmp_path):
    plot_prefix(capacity_table(("translation_1shot", "translation_5shot")), tmp_path / "16.png")
    plot_chat(capacity_table(("chat",)), tmp_path / "17.png")
    prefix, chat = ([t.get_text() for t in fig.axes[0].get_xticklabels()] for fig in drawn)
    assert [t.split("\n")[0] for t in prefix] == ["1shot", "5shot"]
    assert all("paged/oracle 1.33x" in t and "(paper " in t for t in prefix)   # paged 4, oracle 3 (x the seed's)
    assert chat == ["chat\npaged/oracle 1.33x"]


def test_titles_name_the_papers_figure_from_the_data_file(drawn, tmp_path):
    """Each figure's title is docs/report/sharing_figures.yaml's, filled with the figure's values."""
    for plot, workloads in CAPACITY_PLOTS:
        engines = ("paged",) if plot is plot_sharegpt_saving else (*BASELINES, "paged")
        plot(capacity_table(workloads, engines), tmp_path / f"{plot.__name__}.png")
    plot_swap_cost(tmp_path / "19a.png", tokens=512)
    plot_swap_block_size(swap_capacity_table(), None, tmp_path / "19b.png")
    names = ("sampling", "beam", "saving", "prefix", "chat")
    assert [fig._suptitle.get_text() for fig in drawn[:5]] == [figure_title(n) + " | opt-13b" for n in names]
    assert figure_title("sampling").startswith("Figure 14")
    assert drawn[5].axes[0].get_title() == figure_title("swap_cost", tokens=512, model="opt-13b", hardware="a100-40gb")
    assert "512 tokens, opt-13b, a100-40gb" in drawn[5].axes[0].get_title()
    assert drawn[6]._suptitle.get_text() == figure_title("swap_block_size")


def test_oracle_ratio_is_the_mean_of_per_seed_ratios():
    rows = pd.DataFrame({"engine": ["paged", "orca-oracle"] * 2, "seed": [0, 0, 1, 1],
                         "capacity": [4.0, 1.0, 2.0, 2.0]})
    assert oracle_ratio(rows) == pytest.approx((4 / 1 + 2 / 2) / 2)   # the ratio of the means would be 2.0
    assert np.isnan(oracle_ratio(rows[rows["engine"] == "paged"]))


def test_spread_and_setting():
    rows = pd.DataFrame({"k": ["a", "a", "b"], "capacity": [1.0, 3.0, 5.0], "bound": ["=", ">=", "="]})
    out = seed_spread(rows, ["k"])
    assert out[["mean", "low", "high"]].to_numpy().tolist() == [[2.0, 1.0, 3.0], [5.0, 5.0, 5.0]]
    assert out["bound"].tolist() == [">=", "="]
    assert [setting(w) for w in ("alpaca_synthetic", "alpaca_synthetic_n2", "sharegpt_beam6", "translation_5shot")] \
        == ["n1", "n2", "beam6", "5shot"]


# --- Figure 19 --------------------------------------------------------------------------------------------

def test_swap_cost_figure_is_log_log(drawn, tmp_path):
    path = plot_swap_cost(tmp_path / "19a.png")
    assert is_png(path)
    ax = drawn[0].axes[0]
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    swap, recompute = ax.lines
    assert swap.get_ydata()[0] > swap.get_ydata()[-1]                 # swapping small blocks costs more
    assert len(set(np.round(recompute.get_ydata(), 6))) == 1          # recomputation does not depend on it
    assert legend_is_outside(drawn[0])


@pytest.mark.parametrize("cap, agg, panels", [(True, True, 2), (True, False, 1), (False, True, 1)])
def test_swap_block_size_draws_a_panel_per_table(cap, agg, panels, tmp_path):
    fig = swap_block_size_figure(swap_capacity_table() if cap else None, swap_aggregate() if agg else None)
    assert len(fig.axes) == panels
    for ax in fig.axes:
        assert sorted(line.get_label() for line in ax.lines) == ["recompute", "swap"]
        assert ax.get_xscale() == "log"
    assert legend_is_outside(fig)
    assert is_png(plot_swap_block_size(swap_capacity_table() if cap else None, swap_aggregate() if agg else None,
                                       tmp_path / "19b.png"))


def test_swap_block_size_band_is_the_seeds_min_max():
    fig = swap_block_size_figure(swap_capacity_table(), None)
    ax = fig.axes[0]
    swap = next(line for line in ax.lines if line.get_label() == "swap")
    band = ax.collections[[line.get_label() for line in ax.lines].index("swap")]
    low, high = band.get_paths()[0].vertices[:, 1].min(), band.get_paths()[0].vertices[:, 1].max()
    caps = swap_capacity_table().query("preemption == 'swap'")["capacity"]
    assert (low, high) == pytest.approx((caps.min(), caps.max()))
    assert list(swap.get_xdata()) == [1, 4, 16, 64]


def test_swap_block_size_draws_nothing_without_data(tmp_path):
    assert plot_swap_block_size(None, None, tmp_path / "x.png") is None
    assert plot_swap_block_size(swap_capacity_table().iloc[0:0], pd.DataFrame(), tmp_path / "y.png") is None
    assert plot_swap_block_size(capacity_table().drop(columns="block_size"), None, tmp_path / "z.png") is None
    assert list(tmp_path.iterdir()) == []


# --- Figure 12 per seed -----------------------------------------------------------------------------------

def seeded_sweep(engines=("orca-oracle", "paged"), seeds=SEEDS) -> pd.DataFrame:
    """A capacity search's runs: the doubling grid 1, 2, 4, 8 for every seed, then a bisection at its own rates."""
    rows = []
    for e, engine in enumerate(engines):
        for seed in seeds:
            for rate in (1.0, 2.0, 4.0, 8.0, 5.0 + seed / 4 + e, 6.0 + seed / 3 + e):
                rows.append({"engine": engine, "workload": "sharegpt", "model": "opt-13b", "request_rate": rate,
                             "workload_seed": seed, "block_size": 16 if engine == "paged" else None,
                             "steady_norm_latency_s_mean": 0.03 * np.exp(rate / (3 + e + seed / 2))})
    return pd.DataFrame(rows)


def test_latency_draws_a_line_per_engine_and_seed():
    df = seeded_sweep()
    fig = latency_figure(df, threshold=0.2)
    (ax,) = fig.axes
    seed_lines = [line for line in ax.lines if str(line.get_gid()).startswith("seed:")]
    means = [line for line in ax.lines if str(line.get_gid()).startswith("mean:")]
    assert len(seed_lines) == 2 * len(SEEDS)
    assert len(ax.lines) == len(seed_lines) + len(means) + 1   # and the threshold
    # The mean only at the rates every seed ran, never across seeds' own rates.
    assert [list(line.get_xdata()) for line in means] == [[1.0, 2.0, 4.0, 8.0]] * 2
    paged_mean = next(line for line in means if line.get_gid() == "mean:paged")
    grid = df[(df["engine"] == "paged") & df["request_rate"].isin([1.0, 2.0, 4.0, 8.0])]
    assert list(paged_mean.get_ydata()) == pytest.approx(
        grid.groupby("request_rate")["steady_norm_latency_s_mean"].mean().tolist())
    for line in seed_lines:   # each seed's own rates, in order
        assert len(line.get_xdata()) == 6 and list(line.get_xdata()) == sorted(line.get_xdata())
    assert legend_is_outside(fig)


def test_latency_with_one_seed_draws_one_line_per_engine():
    fig = latency_figure(seeded_sweep(seeds=(0,)), threshold=0.2)
    (ax,) = fig.axes
    assert len([line for line in ax.lines if str(line.get_gid()).startswith("seed:")]) == 2
    assert not [line for line in ax.lines if str(line.get_gid()).startswith("mean:")]


def test_paper_figures_keep_their_legends_off_the_panels(drawn, tmp_path):
    df = sweep_table(workloads=("sharegpt", "alpaca_synthetic"))
    for plot in (plot_memory_waste, plot_latency_vs_rate, plot_batch_size, plot_block_size):
        plot(df, tmp_path / f"{plot.__name__}.png")
    assert len(drawn) == 4 and all(legend_is_outside(fig) for fig in drawn)
    assert not [ax for fig in drawn for ax in fig.axes if ax.get_legend() is not None]


# --- TTFT and TPOT at one rate ----------------------------------------------------------------------------

def write_run(folder, engine, rate=2.0, seed=0, finished=4):
    """A run folder: `finished` requests in the steady window [10, 100] s, one before it, one unfinished."""
    folder.mkdir(parents=True)
    arrival = [5.0, *np.linspace(20, 90, finished), 50.0]
    n = len(arrival)
    ttft = 0.1 if engine == "paged" else 1.0
    requests = pd.DataFrame({"id": range(n), "arrival_s": arrival, "first_token_s": [a + ttft for a in arrival],
                             "finish_s": [a + ttft + 0.03 * 9 for a in arrival], "output_len": [10] * n,
                             "status": ["finished"] * (n - 1) + ["running"]})
    requests.to_parquet(folder / "requests.parquet")
    (folder / "summary.json").write_text(json.dumps({
        "engine": engine, "block_size": 16 if engine == "paged" else None, "workload": "sharegpt",
        "request_rate": rate, "workload_seed": seed, "window_start_s": 10.0, "window_end_s": 100.0}))
    return folder


def test_distributions_draw_a_cdf_per_engine_at_the_stated_rate(drawn, tmp_path):
    runs = [write_run(tmp_path / f"{engine}-{seed}", engine, seed=seed)
            for engine in ("orca-oracle", "paged") for seed in (0, 1)]
    path = plot_latency_distributions(runs, tmp_path / "out" / "dist.png")
    assert is_png(path)
    fig = drawn[0]
    assert "2 req/s" in fig._suptitle.get_text()
    ttft_ax, tpot_ax = fig.axes
    assert [line.get_label() for line in ttft_ax.lines] == ["orca-oracle: 8 requests, 2 seeds",
                                                            "paged: 8 requests, 2 seeds"]   # window, finished only
    oracle, paged = ttft_ax.lines
    assert max(paged.get_xdata()) == pytest.approx(0.1) and max(oracle.get_xdata()) == pytest.approx(1.0)
    assert len(tpot_ax.lines) == 2
    assert legend_is_outside(fig)


def test_distributions_refuse_mixed_rates_and_draw_nothing_without_requests(tmp_path):
    runs = [write_run(tmp_path / "a", "paged", rate=2.0), write_run(tmp_path / "b", "orca-oracle", rate=4.0)]
    with pytest.raises(ValueError, match="different request rates"):
        latency_distribution_figure(runs)
    assert plot_latency_distributions([], tmp_path / "x.png") is None
    empty = write_run(tmp_path / "c", "paged", finished=0)
    assert plot_latency_distributions([empty], tmp_path / "y.png") is None   # its one finished request is pre-window


def test_runs_at_a_rate_every_engine_ran(tmp_path):
    df = seeded_sweep().assign(run_dir=lambda d: [f"run{i}" for i in range(len(d))])
    assert shared_rates(df) == [1.0, 2.0, 4.0, 6.0, 8.0]   # 6.0: a bisection step of both engines
    runs = runs_at_rate(tmp_path, df, 2.0, "sharegpt")
    assert len(runs) == 2 * len(SEEDS) and all(p.parent == tmp_path for p in runs)
