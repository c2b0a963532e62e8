"""The report's section on swapping and recomputation (the paper's Figure 19): the sim's costs per block size
(19a), this machine's measured ones, and the paged engine's capacity and latency preempting either way (19b).

The section's prose is docs/report/templates/swapping_section.md.j2; this module computes its tables and values.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from pagedbench.engines.sim.swap_cost import swap_costs
from pagedbench.engines.specs.presets import load_hardware, load_model
from pagedbench.results.report.bounds import bound_note, capacity_part, ratio_cell
from pagedbench.results.report.criteria import criteria
from pagedbench.results.report.markdown import num, table
from pagedbench.results.report.paper import reference, sharing_before
from pagedbench.results.report.read import load, load_aggregate
from pagedbench.results.report.sharing_plots import plot_swap_block_size, plot_swap_cost
from pagedbench.results.report.section import Section, experiment_not_run, step_missing, typed_command
from pagedbench.results.report.setup import trace_setup
from pagedbench.results.report.steps import step
from pagedbench.results.report.tables import preemption_rows
from pagedbench.results.report.template import render
from pagedbench.results.sweeps.capacity import combined_bound

# Figure 19a on the sim: the model, the GPU and the prompt whose swap and recompute costs it sets side by side.
SIM_MODEL, SIM_HARDWARE, SIM_TOKENS = "opt-13b", "a100-40gb", 1024


def section_swap(experiments: Path, swap_bench: Path, figures: Path | None = None) -> Section:
    """Figure 19a on the sim (from the presets: no runs needed) and on this CPU, Figure 19b on the sim."""
    hw = load_hardware(SIM_HARDWARE)
    costs = swap_costs(load_model(SIM_MODEL), hw, SIM_TOKENS)
    rows = [[str(int(r["block_size"])), num(r["swap_one_way_ms"], ".1f"), num(r["recompute_ms"], ".1f"),
             num(r["recompute_over_swap"], ".2f")] for r in costs]
    values = {"hardware": {"name": hw.name, "transfer_latency_us": 1e6 * hw.host_transfer_latency_s,
                           "link_gb_s": hw.host_link_bandwidth / 1e9},
              "model": SIM_MODEL, "tokens": SIM_TOKENS,
              "sim_costs": table(["block size", "swap one way (ms)", "recompute (ms)", "recompute / swap"], rows),
              "sim_costs_figure": False, "bench": None, "capacity": None, "sim": None, "sim_figure": False,
              "comparable": reference()["figure19_comparable_block_sizes"]}
    if figures is not None:
        plot_swap_cost(Path(figures) / "swap_cost.png")
        values["sim_costs_figure"] = True
    section = Section()
    bench = swap_bench / "swap_bench.csv"
    if not bench.is_file():
        section.not_run.append(step_missing("swap_bench", swap_bench))
    else:
        section.has_runs = True
        b = pd.read_csv(bench)
        meta_path = swap_bench / "swap_bench.json"
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        b = b[b["tokens"] == b["tokens"].min()]
        rows = [[str(int(r.block_size)), num(r.swap_out_ms, ".2f"), num(r.swap_in_ms, ".2f"),
                 num(r.recompute_ms, ".0f")] for r in b.itertuples()]
        values["bench"] = {
            "command": typed_command("swap_bench", str(swap_bench.relative_to(swap_bench.parents[1]))),
            "model": meta.get("model", "tiny"), "tokens": int(b["tokens"].iloc[0]), "dtype": meta.get("dtype", ""),
            "fit_latency_us": 1e6 * meta.get("fit_host_transfer_latency_s", float("nan")),
            "table": table(["block size", "swap out (ms)", "swap in (ms)", "recompute (ms)"], rows)}
    cap = capacity_part(experiments, "swap_capacity", step("swap_capacity").title, section)
    if cap is not None:
        values["capacity"] = {
            "command": typed_command("swap_capacity"), "latency_s_per_token": criteria().latency_s_per_token,
            "setup": trace_setup(load(experiments, "swap_capacity")),
            "table": table(["block size", "swap", "recompute", "swap / recompute"], swap_capacity_rows(cap))}
    agg = load_aggregate(experiments, "swap")
    if agg is None:
        section.not_run.append(experiment_not_run(step("swap").title, "swap", experiments))
    else:
        section.has_runs = True
        before = sharing_before()
        rows = [r + [f"{before.swap_latency['swap'].get(int(r[0]), float('nan')):.3f} / "
                     f"{before.swap_latency['recompute'].get(int(r[0]), float('nan')):.3f}"]
                for r in preemption_rows(agg, "steady_norm_latency_s_mean", ".3f")]
        values["sim"] = {
            "command": typed_command("swap"), "before_commit": before.commit, "setup": trace_setup(agg),
            "table": table(["block size", "req/s", "swap: latency", "swap: preemptions", "recompute: latency",
                            "recompute: preemptions", f"before ({before.commit}): swap / recompute"], rows)}
    if figures is not None and plot_swap_block_size(cap, agg, Path(figures) / "swap_block_size.png") is not None:
        values["sim_figure"] = True
    section.text = render("swapping_section.md.j2", **values)
    return section


def swap_capacity_rows(cap: pd.DataFrame) -> list[list[str]]:
    """Per block size: the capacity preempting by swap and by recompute (mean (min-max) over seeds), and their
    ratio (mean of the per-seed ratios); a capacity that is only a bound says so."""
    sub = cap[cap["criterion"].str.startswith("latency")]
    rows = []
    for bs, g in sub.groupby("block_size"):
        seeds = g.pivot_table(index="seed", columns="preemption", values="capacity", aggfunc="mean")
        bounds = g.groupby("preemption")["bound"].agg(combined_bound)
        cells = []
        for p in ("swap", "recompute"):
            if p not in seeds:
                cells.append("n/a")
                continue
            c = seeds[p].dropna()
            spread = f" ({c.min():.3g}-{c.max():.3g})" if len(c) > 1 else ""
            cells.append(f"{c.mean():.3g}{spread}" + bound_note(bounds[p]))
        ratio = ratio_cell(seeds["swap"] / seeds["recompute"]) if {"swap", "recompute"} <= set(seeds) else "n/a"
        rows.append([str(int(bs)), *cells, ratio])
    return rows
