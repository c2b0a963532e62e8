"""The tables more than one part of the report shows, each computed once: Figure 2's KV split and Figure 12's
capacities (the paper's sections and the README's results block), the sharing figures' capacities and ratios
(the sharing sections and the README's block), and the preemption rows of swap against recompute (the swapping
section and the real CPU backend's). A section imports these, never another section.
"""
from __future__ import annotations

import pandas as pd

from pagedbench.engines import registry
from pagedbench.results.report.bounds import bound_note, ratio_cell
from pagedbench.results.report.markdown import num, pct
from pagedbench.results.report.paper import paper
from pagedbench.results.report.sharing_plots import setting
from pagedbench.results.sweeps.capacity import capacity_summary, combined_bound, ratio_summary, ratio_table
from pagedbench.results.sweeps.sustainable import ratio_bound

# Figure 2's KV split and Figure 12's capacity table: their columns.
CATS = ("token_states", "reservation", "internal_fragmentation", "external_fragmentation", "free")
CAPACITY_HEADER = ["workload", *registry.LABELS, *(f"paged / {b.label}" for b in registry.baselines())]
MEMORY_HEADER = ["engine", "token states", "reservation", "internal frag.", "ext. frag. & others", "free",
                 "token states, whole run", "batch", "paper (tokens / reserv. / internal / ext.)",
                 "token states: ours - paper"]
# The sharing figures' baselines: Orca's reservations, in the table's order, and paged's ratio column over each.
ORCA = tuple(e for e in registry.ENGINES if e.kind == "orca")
BASELINES = tuple(e.label for e in ORCA)
RATIOS = tuple(f"paged/{e.reservation}" for e in ORCA)          # paged/max, paged/pow2, paged/oracle
ORACLE = registry.label("orca_oracle")
LIMIT_WORDS = {"memory": "memory", "max_num_seqs": "row cap", "token_budget": "token budget"}
# capacity_rows' columns: setting, each baseline's capacity, paged's, paged over each baseline, saving, ...
ORACLE_RATIO = 2 + len(BASELINES) + BASELINES.index(ORACLE)
SAVING = 2 + 2 * len(BASELINES)


def memory_rows(df: pd.DataFrame) -> list[list[str]]:
    """Figure 2's table (MEMORY_HEADER): each engine's KV split over the steady window, its whole-run token states,
    its batch, and the paper's split beside it."""
    rows = []
    for engine in registry.LABELS:
        r = df[df["engine"] == engine]
        if not len(r):
            continue
        r = r.iloc[0]
        paper_split = paper().figure2.get(engine)
        diff = f"{100 * r['steady_mem_token_states'] - paper_split[0]:+.1f}" if paper_split else ""
        rows.append([engine, *(pct(r[f"steady_mem_{c}"]) for c in CATS), pct(r["mem_token_states"]),
                     num(r["steady_mean_batch_size"], ".1f"),
                     " / ".join("-" if p is None else f"{p}" for p in paper_split) if paper_split else "not reported",
                     diff])
    return rows


def capacity_tables(capacity: pd.DataFrame) -> list[tuple[str, list[list[str]]]]:
    """Per criterion (the latency criterion first): one row per workload, each engine's capacity and paged's ratio
    over each baseline, as mean (min-max) over seeds (Figure 12's tables: CAPACITY_HEADER)."""
    caps = capacity_summary(capacity)
    rel = ratio_summary(ratio_table(capacity))
    tables = []
    for criterion in sorted(caps["criterion"].unique(), key=lambda c: not c.startswith("latency")):
        rows = []
        for workload in sorted(caps["workload"].unique()):
            c = caps[(caps["criterion"] == criterion) & (caps["workload"] == workload)].set_index("engine")
            q = rel[(rel["criterion"] == criterion) & (rel["workload"] == workload)].set_index("baseline")
            cells = [workload]
            for engine in registry.LABELS:
                cells.append(spread(c, engine, "{:.3g}") if engine in c.index else "n/a")
            for base in (b.label for b in registry.baselines()):
                cells.append(spread(q, base, "{:.2f}x") if base in q.index else "n/a")
            rows.append(cells)
        tables.append((criterion, rows))
    return tables


def spread(table_: pd.DataFrame, key: str, spec: str) -> str:
    row = table_.loc[key]
    if isinstance(row, pd.DataFrame):
        row = row.iloc[0]
    return f"{spec.format(row['mean'])} ({spec.format(row['min'])}-{spec.format(row['max'])}){bound_note(row['bound'])}"


def binding_limit(runs: pd.DataFrame) -> str:
    """Which limit kept waiting requests out in the runs at capacity (mean over seeds of each limit's share of the
    steady window's iterations with a queue), with the KV left free and the preemptions (mean over seeds): "row
    cap 97%, KV 45% free"; "n/a" for a capacity table written before these were recorded. The shares need not
    add to 100%: while preempted (swapped) groups wait to come back, they go first and no limit is named."""
    columns = [f"blocked_by_{limit}_at_capacity" for limit in LIMIT_WORDS]
    if not len(runs) or any(c not in runs for c in columns) or runs[columns].isna().all().all():
        return "n/a"
    shares = runs[columns].mean()
    top = shares.idxmax()
    if not shares[top] > 0:
        return "none (no queue)"
    limit = top.removeprefix("blocked_by_").removesuffix("_at_capacity")
    free = runs["mem_free_at_capacity"].mean() if "mem_free_at_capacity" in runs else float("nan")
    text = f"{LIMIT_WORDS[limit]} {100 * shares[top]:.0f}%, KV {pct(free)}% free"
    preempted = runs["preemptions_at_capacity"].mean() if "preemptions_at_capacity" in runs else float("nan")
    return text + (f", {preempted:,.0f} preemptions" if preempted > 0 else "")


def capacity_rows(cap: pd.DataFrame, criterion: str, paper_saving: dict | None = None) -> list[list[str]]:
    """One row per workload setting: each engine's capacity (mean over seeds), paged over each baseline (mean
    and min-max of the per-seed ratios), the memory saving in the paged run at its capacity (mean). A figure
    that is only a bound (some seed's search did not bracket it) says which bound it is."""
    rows = []
    sub = cap[cap["criterion"].str.startswith(criterion)]
    for workload, group in sub.groupby("workload", sort=False):
        seeds = group.pivot_table(index="seed", columns="engine", values="capacity", aggfunc="mean")
        bounds = group.groupby(["seed", "engine"])["bound"].agg(combined_bound).unstack().fillna("=")
        caps = seeds.mean()
        cells = [num(caps.get(e)) + (bound_note(combined_bound(bounds[e])) if e in bounds else "")
                 for e in (*BASELINES, "paged")]
        ratios = [ratio_cell(seeds["paged"] / seeds[b]) + bound_note(combined_bound(map(ratio_bound, bounds["paged"],
                                                                                     bounds[b])))
                  if "paged" in seeds and b in seeds else "n/a" for b in BASELINES]
        paged = group[group["engine"] == "paged"]
        saving = paged["memory_saving_at_capacity"].mean() if len(paged) else None
        key = setting(workload)
        row = [key] + cells + ratios
        row.append(pct(saving))
        row.append(binding_limit(paged))
        if paper_saving is not None:
            row.append(num(paper_saving.get(key)) if key in paper_saving else "-")
        rows.append(row)
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
