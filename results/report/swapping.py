"""The report's section on swapping and recomputation (the paper's Figure 19): the sim's costs per block size
(19a), this machine's measured ones, and the paged engine's capacity and latency preempting either way (19b)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from engines.sim.swap_cost import swap_costs
from engines.specs.presets import load_hardware, load_model
from results.report.bounds import bound_note, capacity_part, ratio_cell
from results.report.markdown import num, table
from results.report.paper import sharing_before
from results.report.read import load_aggregate
from results.report.sharing_plots import plot_swap_block_size, plot_swap_cost
from results.report.section import NotRun, Section, experiment_not_run, shown
from results.sweeps.capacity import combined_bound


def section_swap(experiments: Path, swap_bench: Path, figures: Path | None = None) -> Section:
    """Figure 19a on the sim (from the presets: no runs needed) and on this CPU, Figure 19b on the sim."""
    head = ("## Swapping and recomputation (Figure 19)\n\n"
            "A preempted request's blocks move to a host pool and back (`engine.preemption=swap`), or are freed "
            "and recomputed by a prefill (`recompute`). The sim charges a swap one transfer per block, layer, K "
            "and V, each 10 us of fixed cost (an assumption for a small pinned cudaMemcpyAsync: launch and DMA "
            "set-up, not measured on an A100 here) plus its bytes over 25 GB/s of PCIe 4.0 "
            "(`conf/hardware/a100-40gb.yaml`). As vLLM's cache engine issues them on a separate CUDA stream and "
            "each layer waits only for its own layer's copies, swaps overlap the forward pass layer by layer: an "
            "iteration of compute C and transfers T over L layers takes max(C + T/L, T + C/L) "
            "(`engines/sim/transfer.py`; `hardware.host_transfer_overlap=false` runs them before the forward pass, "
            "as the previous revision did). The overlap is the optimistic bound for small blocks: the host's "
            "share of each transfer's fixed cost cannot hide behind the GPU.\n\n")
    costs = swap_costs(load_model("opt-13b"), load_hardware("a100-40gb"), 1024)
    rows = [[str(int(r["block_size"])), num(r["swap_one_way_ms"], ".1f"), num(r["recompute_ms"], ".1f"),
             num(r["recompute_over_swap"], ".2f")] for r in costs]
    parts = [head, "**Figure 19a on the sim**, `python -m studies.swap_cost` (OPT-13B, A100-40GB, 1,024 tokens):\n\n"
             + table(["block size", "swap one way (ms)", "recompute (ms)", "recompute / swap"], rows) + "\n"]
    if figures is not None:
        plot_swap_cost(Path(figures) / "swap_cost.png")
        parts.append("![Figure 19a on the sim](figures/swap_cost.png)\n")
    section = Section()
    bench = swap_bench / "swap_bench.csv"
    if not bench.is_file():
        section.not_run.append(NotRun("Swapping: Figure 19a on this machine's CPU",
                                      f"python -m studies.swap_bench --out {shown(swap_bench)}", swap_bench))
    else:
        section.has_runs = True
        b = pd.read_csv(bench)
        meta_path = swap_bench / "swap_bench.json"
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        b = b[b["tokens"] == b["tokens"].min()]
        rows = [[str(int(r.block_size)), num(r.swap_out_ms, ".2f"), num(r.swap_in_ms, ".2f"),
                 num(r.recompute_ms, ".0f")] for r in b.itertuples()]
        parts.append(f"**Figure 19a on this machine's CPU**, `python -m studies.swap_bench --out "
                     f"{swap_bench.relative_to(swap_bench.parents[1])}` ({meta.get('model', 'tiny')} model, "
                     f"{int(b['tokens'].iloc[0])} tokens, {meta.get('dtype', '')}; a CPU's \"host link\" is a memcpy "
                     f"in RAM, and recomputation is slow on 2 cores; fitted: "
                     f"{1e6 * meta.get('fit_host_transfer_latency_s', float('nan')):.1f} us per transfer):\n\n"
                     + table(["block size", "swap out (ms)", "swap in (ms)", "recompute (ms)"], rows) + "\n")
    cap = capacity_part(experiments, "swap_capacity", "Swapping: Figure 19b as capacities", section)
    if cap is not None:
        parts.append("**Figure 19b as capacities**, `python run.py -m experiment=swap_capacity` (the paged "
                     "engine's capacity at each block size and policy, mean normalized latency <= 0.2 s/token, "
                     "ShareGPT, 10-minute Poisson traces, seeds 0-2; req/s, mean (min-max)):\n\n"
                     + table(["block size", "swap", "recompute", "swap / recompute"], swap_capacity_rows(cap))
                     + "\n")
    agg = load_aggregate(experiments, "swap")
    if agg is None:
        section.not_run.append(experiment_not_run("Swapping: Figure 19b on the sim", "swap", experiments))
    else:
        section.has_runs = True
        before = sharing_before()
        rows = [r + [f"{before.swap_latency['swap'].get(int(r[0]), float('nan')):.3f} / "
                     f"{before.swap_latency['recompute'].get(int(r[0]), float('nan')):.3f}"]
                for r in preemption_rows(agg, "steady_norm_latency_s_mean", ".3f")]
        parts.append("**Figure 19b on the sim**, `python run.py -m experiment=swap` (ShareGPT for an hour, each block "
                     "size at 85% of its own capacity, the lower of its two policies' above (`conf/experiment/"
                     "swap.yaml`): memory runs short and requests are preempted, but no queue grows without end; "
                     "mean normalized latency over the steady window, s/token). The last column is the previous "
                     f"revision's ({before.commit}: every block size at 4 req/s, past the capacity of blocks <= 4 "
                     "and 256, swaps serial):\n\n"
                     + table(["block size", "req/s", "swap: latency", "swap: preemptions", "recompute: latency",
                               "recompute: preemptions", f"before ({before.commit}): swap / recompute"], rows) + "\n")
    if figures is not None and plot_swap_block_size(cap, agg, Path(figures) / "swap_block_size.png") is not None:
        parts.append("![Figure 19b on the sim](figures/swap_block_size.png)\n")
    parts.append("The paper: swapping suffers with small blocks (many small PCIe transfers); recomputation's cost "
                 "does not depend on the block size; the two are comparable for blocks of 16-64.\n")
    section.text = "\n".join(parts)
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


def preemption_rows(agg: pd.DataFrame, metric: str, spec: str) -> list[list[str]]:
    """Per block size: its request rate, `metric` and the preemptions, preempting by swap and by recompute."""
    rows = []
    for bs, g in agg.groupby("block_size"):
        by = {p: s.iloc[0] for p, s in g.groupby("preemption")}
        rate = g["request_rate"].iloc[0] if "request_rate" in g else None
        cells = [num(rate)]
        for p in ("swap", "recompute"):
            s = by.get(p)
            cells += ["n/a", "n/a"] if s is None else [num(s[metric], spec), num(s["num_preemptions"], ".0f")]
        rows.append([str(int(bs)), *cells])
    return rows
