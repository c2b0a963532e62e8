"""The report's sections on the paper's main figures, read from the experiments' sweeps: the method,
Table 1 (the KV budget, from the presets), Figure 2 (memory waste), Figure 12 (capacity), Figure 13 (batch
size) and Figure 18b (block size), each beside the paper's numbers (`pagedbench.results.report.paper`).

Code computes the tables and the values the prose quotes; the prose is docs/report/templates/paper_*.md.j2."""
from __future__ import annotations

import inspect
import math
from pathlib import Path

import pandas as pd

from pagedbench.engines import registry
from pagedbench.engines.kv.budget import GiB, kv_budget
from pagedbench.engines.specs.presets import load_hardware, load_model
from pagedbench.paths import EXPERIMENTS
from pagedbench.results.report.bounds import bound_note, capacity_warnings
from pagedbench.results.report.criteria import criteria
from pagedbench.results.report.markdown import num, pct
from pagedbench.results.report.paper import earlier_report, paper, reference
from pagedbench.results.report.plots import (has_curve, plot_batch_size, plot_block_size, plot_latency_vs_rate,
                                  plot_memory_waste, rate_curves)
from pagedbench.results.report.read import load, load_capacity, read_parquet
from pagedbench.results.report.setup import SECONDS_PER_HOUR, duration_words, trace_setup
from pagedbench.results.report.section import Section, shown, step_command, step_not_run
from pagedbench.results.report.tables import CAPACITY_HEADER, MEMORY_HEADER, capacity_tables, memory_rows
from pagedbench.results.report.template import render
from pagedbench.results.sweeps.capacity import capacity_summary, ratio_summary, ratio_table
from pagedbench.results.sweeps.sustainable import ratio_bound

ORACLE, MAX = registry.label("orca_oracle"), registry.label("orca_max")
TRACE_LENGTH_STEP = "capacity_1000_requests"


def section_table1() -> Section:
    utilization = inspect.signature(kv_budget).parameters["gpu_memory_utilization"].default
    rows = []
    for model, hw, w, kv, slots in paper().table1:
        spec, hardware = load_model(model), load_hardware(hw)
        b = kv_budget(spec, hardware)
        rows.append([f"{model}, {spec.tp}x {hw}", f"{b.weight_bytes / 1e9:.1f} GB", f"{b.kv_bytes / GiB:.2f} GiB",
                     f"{b.num_slots:,}", f"{w} GB / {kv} GB / {slots}"])
    # The share of its group's memory the paper's largest setting fills: its weights (GB) and KV (read as GiB).
    model, hw, w, kv, _ = max(paper().table1, key=lambda r: r[2])
    memory = load_hardware(hw).memory_bytes * load_model(model).tp
    return Section(render("paper_table1.md.j2", rows=rows, utilization=utilization, largest=model,
                          fill=(w * 1e9 + kv * GiB) / memory, memory_gib=memory / GiB))


def trace_length_effect(capacity: pd.DataFrame, short: pd.DataFrame, root: Path = EXPERIMENTS.parent,
                        runs: pd.DataFrame | None = None, short_runs: pd.DataFrame | None = None) -> str:
    """The same search on fixed-count traces (`short`, the step capacity_1000_requests) against fixed-duration
    ones (`capacity`), ShareGPT, the short search's seed, latency criterion (`root`: the records' root, for the
    command of the short traces' step; `runs` and `short_runs`: the two searches' runs, which say how they were
    made)."""
    seed = int(short["seed"].min()) if len(short) else 0

    def at(table, engine) -> tuple[float, str]:
        r = table[(table["workload"] == "sharegpt") & (table["seed"] == seed) & (table["engine"] == engine)
                  & table["criterion"].str.startswith("latency")]
        return (float(r["capacity"].iloc[0]), r["bound"].iloc[0]) if len(r) else (math.nan, "=")

    def ratio(table) -> str:
        (paged, paged_bound), (oracle, oracle_bound) = at(table, "paged"), at(table, ORACLE)
        return num(paged / oracle, ".2f") + "x" + bound_note(ratio_bound(paged_bound, oracle_bound))

    rows = []
    for engine in (ORACLE, "paged"):
        rows.append([engine, *(num(c, ".3g") + bound_note(b) for c, b in (at(short, engine), at(capacity, engine)))])
    rows.append([f"paged / {ORACLE}", ratio(short), ratio(capacity)])
    long = trace_setup(runs)
    duration = long["durations"][0] if len(long["durations"]) == 1 else math.nan
    return render("paper_trace_length.md.j2", c=criteria(), command=step_command(TRACE_LENGTH_STEP, root), rows=rows,
                  seed=seed, short=trace_setup(short_runs), long=long,
                  long_span=f"a {duration_words(duration)} trace" if duration == duration else "a fixed-duration trace",
                  per_trace=float(format(at(capacity, "paged")[0] * duration, ".2g")))


def unloaded_latency(runs: pd.DataFrame | None) -> float | None:
    """The mean normalized latency (s/token) of the least loaded ShareGPT run of the capacity search, or None."""
    if runs is None or "steady_norm_latency_s_mean" not in runs:
        return None
    latency = runs.loc[runs["workload"] == "sharegpt", "steady_norm_latency_s_mean"].dropna()
    return float(latency.min()) if len(latency) else None


def section_method(capacity: pd.DataFrame | None, short: pd.DataFrame | None = None,
                   short_dir: Path = EXPERIMENTS / TRACE_LENGTH_STEP, runs: pd.DataFrame | None = None) -> Section:
    """What the measurement method is, and the earlier report's ratios beside this one's (with the capacity search's
    runs; the search on 1,000-request traces, in `short_dir`, adds the trace-length effect). `runs`, the capacity
    search's runs, give the unloaded latency the criterion is set against."""
    c = criteria()
    setup = trace_setup(runs)
    setup["as_paper"] = setup["durations"] == [SECONDS_PER_HOUR]
    setup["shorter"] = bool(setup["durations"]) and max(setup["durations"]) < SECONDS_PER_HOUR
    text = render("paper_method.md.j2", c=c, unloaded=unloaded_latency(runs), setup=setup)
    if capacity is None:
        return Section(text)
    new = ratio_summary(ratio_table(capacity))
    new = new[new["criterion"].str.startswith("latency")]
    rows = []
    earlier = earlier_report()
    for (workload, baseline), old in earlier.ratios.items():
        r = new[(new["workload"] == workload) & (new["baseline"] == baseline)]
        cell = (f"{r['mean'].iloc[0]:.2f}x ({r['min'].iloc[0]:.2f}-{r['max'].iloc[0]:.2f})"
                + bound_note(r["bound"].iloc[0])) if len(r) else "n/a"
        rows.append([workload, f"paged / {baseline}", f"{old:.2f}x", cell])
    caps = capacity_summary(capacity)
    knee = caps[caps["criterion"].str.startswith("latency") & caps["workload"].str.startswith("alpaca")
                & (caps["engine"] == MAX)]["mean"]
    text += render("paper_method_ratios.md.j2", c=c, commit=earlier.commit, rows=rows, setup=setup,
                   knee=float(knee.iloc[0]) if len(knee) else None)
    root = Path(short_dir).parent.parent
    if short is None:
        return Section(text, has_runs=True, not_run=[step_not_run(TRACE_LENGTH_STEP, root)])
    short_runs = load(Path(short_dir).parent, Path(short_dir).name)
    return Section(text + "\n" + trace_length_effect(capacity, short, root, runs, short_runs), has_runs=True,
                   warnings=capacity_warnings(short, short_dir))


def section_memory(df: pd.DataFrame | None, figures: Path, sweep: Path) -> Section:
    if df is None:
        return Section(not_run=[step_not_run("memory_waste", sweep.parent.parent)])
    plot_memory_waste(df, figures / "memory_waste.png", prefix="steady_mem")
    first = df.iloc[0]
    return Section(render("paper_memory.md.j2", command=step_command("memory_waste", sweep.parent.parent),
                          requests=int(first["num_requests"]), model=first["model"], hardware=first["hardware"],
                          block_size=df["block_size"].dropna().max(), c=criteria(), header=MEMORY_HEADER,
                          rows=memory_rows(df), lengths=trace_lengths(df, sweep), paper=reference()), has_runs=True)


def trace_lengths(df: pd.DataFrame, sweep: Path) -> dict[str, float] | None:
    """The trace's mean prompt and output lengths (tokens), read from a run's requests table, or None."""
    path = sweep / df["run_dir"].iloc[0] / "requests.parquet"
    if not path.is_file():
        return None
    reqs = read_parquet(path)
    return {"prompt": float(reqs["prompt_len"].mean()), "output": float(reqs["output_len"].mean())}


def section_capacity(capacity: pd.DataFrame | None, runs: pd.DataFrame | None, figures: Path,
                     experiments: Path = EXPERIMENTS) -> Section:
    if capacity is None:
        return Section(not_run=[step_not_run("capacity", experiments.parent)])
    tables = capacity_tables(capacity)
    curve = runs is not None and has_curve(rate_curves(runs))
    if curve:
        plot_latency_vs_rate(runs, figures / "latency_vs_rate.png", threshold=criteria().latency_s_per_token)
    text = render("paper_capacity.md.j2", command=step_command("capacity", experiments.parent),
                  folder=shown(experiments / "capacity"), c=criteria(),
                  header=CAPACITY_HEADER, tables=tables,
                  warnings=capacity_warnings(capacity), paper=reference(), curve=curve, setup=trace_setup(runs))
    return Section(text, has_runs=True, warnings=capacity_warnings(capacity, experiments / "capacity"))


def section_batch(df: pd.DataFrame | None, figures: Path, experiments: Path = EXPERIMENTS) -> Section:
    if df is None:
        return Section(not_run=[step_not_run("batch_size", experiments.parent)])
    plot_batch_size(df, figures / "batch_size.png")
    rows = []
    for (workload, rate), g in df.groupby(["workload", "request_rate"]):
        by = g.set_index("engine")["steady_mean_batch_size"]
        paper_batch = paper().figure13.get((workload, float(rate)))
        rows.append([workload, num(rate, "g"), *(num(by.get(e, math.nan), ".2f") for e in registry.LABELS),
                     " / ".join(f"{p:.2f}" for p in paper_batch) if paper_batch else ""])
    # The paper's settings: its rate, and vLLM's batch over Orca (Oracle)'s (batch: orca max / pow2 / oracle / vLLM).
    settings = {workload: {"rate": rate, "ratio": batch[3] / batch[2]}
                for (workload, rate), batch in paper().figure13.items()}
    sharegpt = settings["sharegpt"]
    alpaca = next(v for k, v in settings.items() if k.startswith("alpaca"))
    return Section(render("paper_batch.md.j2", command=step_command("batch_size", experiments.parent),
                          engines=registry.LABELS, rows=rows, **orca_max_batch(df), saturated=saturated(df),
                          setup=trace_setup(df),
                          sharegpt=sharegpt, alpaca=alpaca,
                          share=capacity_share(experiments, "sharegpt", sharegpt["rate"]),
                          output=mean_output(df, experiments / "batch_size", "sharegpt", sharegpt["rate"]),
                          paper_output=reference()["figure11_sharegpt_mean_len"]["output"]), has_runs=True)


def orca_max_batch(df: pd.DataFrame) -> dict:
    """Orca (Max)'s mean batch at each workload's highest rate, where memory binds (one figure, or low-high), the
    paper's, and how many regions of max_seq_len slots the KV budget of its runs holds."""
    top = df[(df["engine"] == MAX)
             & (df["request_rate"] == df.groupby("workload")["request_rate"].transform("max"))]
    if not len(top):
        return {"orca_max": None, "paper_orca_max": None, "regions": None, "region_slots": None}

    def span(values) -> str:
        shown_ = list(dict.fromkeys(num(v, ".3g") for v in sorted(values)))
        return shown_[0] if len(shown_) == 1 else f"{shown_[0]}-{shown_[-1]}"

    region = load_model(top["model"].iloc[0]).max_seq_len
    return {"orca_max": span(top["steady_mean_batch_size"]),
            "paper_orca_max": span(batch[0] for batch in paper().figure13.values()),
            "regions": int(top["kv_budget_slots"].iloc[0]) // region, "region_slots": region}


def saturated(df: pd.DataFrame) -> list[dict]:
    """Paged's mean batch over Orca (Oracle)'s at each workload's highest rate, where memory binds."""
    notes = []
    for workload, share in df.groupby("workload"):
        top = share[share["request_rate"] == share["request_rate"].max()].set_index("engine")["steady_mean_batch_size"]
        if "paged" in top and ORACLE in top:
            notes.append({"workload": workload, "rate": share["request_rate"].max(),
                          "ratio": top["paged"] / top[ORACLE]})
    return notes


def capacity_share(experiments: Path, workload: str, rate: float) -> float | None:
    """`rate` as a share of paged's mean capacity on `workload` under the latency criterion (Figure 12's search),
    or None without that search."""
    capacity = load_capacity(experiments)
    if capacity is None:
        return None
    caps = capacity_summary(capacity)
    cap = caps[caps["criterion"].str.startswith("latency") & (caps["workload"] == workload)
               & (caps["engine"] == "paged")]["mean"]
    return rate / float(cap.iloc[0]) if len(cap) and cap.iloc[0] > 0 else None


def mean_output(df: pd.DataFrame, sweep: Path, workload: str, rate: float) -> float | None:
    """The mean output length (tokens) of the trace the runs of `workload` at `rate` served, or None."""
    for run_dir in df.loc[(df["workload"] == workload) & (df["request_rate"] == rate), "run_dir"]:
        path = sweep / run_dir / "requests.parquet"
        if path.is_file():
            return float(read_parquet(path, columns=["output_len"])["output_len"].mean())
    return None


def section_blocks(df: pd.DataFrame | None, figures: Path, experiments: Path = EXPERIMENTS) -> Section:
    if df is None:
        return Section(not_run=[step_not_run("block_size", experiments.parent)])
    plot_block_size(df, figures / "block_size.png")
    settings = sorted({(w, float(r)) for w, r in zip(df["workload"], df["request_rate"])})
    blocks = sorted(int(b) for b in df["block_size"].dropna().unique())
    rows = []
    for block in blocks:
        cells = [str(block)]
        for workload, rate in settings:
            r = df[(df["block_size"] == block) & (df["workload"] == workload) & (df["request_rate"] == rate)]
            if not len(r):
                cells.append("n/a")
                continue
            r = r.iloc[0]
            cells.append(f"{num(r['steady_mean_batch_size'], '.1f')} / {pct(r['steady_mem_token_states'])} / "
                         f"{num(r['steady_norm_latency_s_mean'], '.3f')}")
        rows.append(cells)
    return Section(render("paper_blocks.md.j2", command=step_command("block_size", experiments.parent),
                          blocks=blocks, header=["block", *(f"{w} {num(r, 'g')} req/s" for w, r in settings)],
                          rows=rows, cost=load_hardware(df["hardware"].iloc[0]).paged_block_cost_tokens, setup=trace_setup(df),
                          best=best_blocks(df), paper=reference()), has_runs=True)


def best_blocks(df: pd.DataFrame) -> str | None:
    """The block sizes with the lowest mean normalized latency at each workload's highest rate, where memory binds:
    one size, or the lowest-highest of them; None without latencies."""
    top = df[df["request_rate"] == df.groupby("workload")["request_rate"].transform("max")]
    top = top.dropna(subset=["steady_norm_latency_s_mean", "block_size"])
    if not len(top):
        return None
    best = sorted({int(g.loc[g["steady_norm_latency_s_mean"].idxmin(), "block_size"])
                   for _, g in top.groupby("workload")})
    return str(best[0]) if len(best) == 1 else f"{best[0]}-{best[-1]}"
