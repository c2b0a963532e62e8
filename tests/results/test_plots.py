"""The paper figures: each draws a PNG from a small table; plot_all draws only what the table supports."""
import math

import pandas as pd
import pytest

from pagedbench.results.report.plots import (default_block, plot_all, plot_batch_size, plot_block_size, plot_latency_vs_rate,
                           plot_memory_waste)

ENGINES = ["static", "orca-max", "orca-pow2", "orca-oracle", "paged"]
PNG = b"\x89PNG\r\n\x1a\n"


def row(engine, rate, block_size=None, workload="sharegpt", waiting=True):
    """One aggregate row; latency grows with the rate, faster for the wasteful engines."""
    waste = {"static": 8.0, "orca-max": 4.0, "orca-pow2": 2.0, "orca-oracle": 1.0, "paged": 0.25}[engine]
    tokens = 0.9 if engine == "paged" else 0.2
    split = {"token_states": tokens, "reservation": 0.05, "internal_fragmentation": (0.85 - tokens) / 2,
             "external_fragmentation": (0.85 - tokens) / 2, "free": 0.1}
    return {"engine": engine, "block_size": block_size, "workload": workload, "model": "opt-13b",
            "backend": "sim", "request_rate": rate, "requests_per_s": 1.0 if rate is None else min(rate, 3 / waste),
            "mean_batch_size": 40 * tokens * (block_size or 16) ** -0.1,
            "norm_latency_s_mean": 0.03 * math.exp(waste * (rate or 4) / 4),
            **{f"mem_{k}": v for k, v in split.items()},
            **{f"mem_waiting_{k}": (v if waiting else math.nan) for k, v in split.items()}}


def sweep_table(rates=(1, 2, 4), blocks=(8, 16, 32), workloads=("sharegpt",)):
    rows = [row(e, r, 16 if e == "paged" else None, w) for w in workloads for e in ENGINES for r in rates]
    rows += [row("paged", rates[-1], b, w) for w in workloads for b in blocks if b != 16]
    return pd.DataFrame(rows).astype({"block_size": "Int64"})


def is_png(path):
    data = path.read_bytes()
    return data.startswith(PNG) and len(data) > 5_000


@pytest.mark.parametrize("plot", [plot_memory_waste, plot_latency_vs_rate, plot_batch_size, plot_block_size])
def test_each_figure_writes_a_png(plot, tmp_path):
    path = plot(sweep_table(workloads=("sharegpt", "alpaca_synthetic")), tmp_path / "figure.png")
    assert path == tmp_path / "figure.png" and is_png(path)
    assert [p.name for p in tmp_path.iterdir()] == ["figure.png"]   # no temporary file left


def test_memory_waste_while_waiting_and_offline(tmp_path):
    df = pd.concat([sweep_table(), pd.DataFrame([row(e, None) for e in ENGINES])])
    assert is_png(plot_memory_waste(df, tmp_path / "w.png", prefix="mem_waiting"))


def test_plot_all_draws_every_figure_the_table_supports(tmp_path):
    written = plot_all(sweep_table(), tmp_path / "figures")
    assert [p.name for p in written] == ["memory_waste.png", "memory_waste_while_waiting.png",
                                         "latency_vs_rate.png", "batch_size.png", "block_size.png"]
    assert all(is_png(p) for p in written)


def test_plot_all_skips_what_the_table_cannot_support(tmp_path):
    # One rate, one block size, no waiting: no latency curve, no block-size figure, no waiting split.
    df = pd.DataFrame([row(e, 2.0, 16 if e == "paged" else None, waiting=False) for e in ENGINES])
    written = plot_all(df, tmp_path)
    assert [p.name for p in written] == ["memory_waste.png", "batch_size.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch_size.png", "memory_waste.png"]
    assert plot_all(df.iloc[0:0], tmp_path / "empty") == []
    with pytest.raises(ValueError, match="two or more finite request rates"):
        plot_latency_vs_rate(df, tmp_path / "x.png")
    with pytest.raises(ValueError, match="two or more block sizes"):
        plot_block_size(df, tmp_path / "y.png")


def test_offline_runs_make_no_latency_curve(tmp_path):
    df = pd.DataFrame([row(e, r) for e in ENGINES for r in (None, 2.0)])
    assert "latency_vs_rate.png" not in [p.name for p in plot_all(df, tmp_path)]


def test_default_block_keeps_paged_at_16():
    df = default_block(sweep_table())
    assert set(df.loc[df["engine"] == "paged", "block"]) == {16}
    assert len(df[df["engine"] == "static"]) == 3


def test_a_curve_needs_one_engine_at_two_rates(tmp_path):
    df = pd.DataFrame([row("orca-max", 1.0), row("paged", 2.0, 16)])
    assert "latency_vs_rate.png" not in [p.name for p in plot_all(df, tmp_path)]
