"""The report's sections on sharing and swapping (the paper's Figures 14-17 and 19), read from run folders.

Each section reads the capacity table (`capacity.csv`) or the aggregate of its
experiment under outputs/experiments/NAME, and sets the paper's numbers
beside ours; a part without runs is left out and named (`section.NotRun`).
A capacity that is only a bound says so in words ("6, lower bound"), as does
a ratio with one in it. `results.report.write` puts them in the report.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from engines.sim.swap_cost import swap_costs
from engines.specs.presets import load_hardware, load_model
from results.report.paper import paper, sharing_before
from results.report.section import NotRun, Section, experiment_not_run, shown
from results.sweeps.capacity import BOUND_WORDS, CAPACITY_CSV, bound_warning, combined_bound
from results.sweeps.sustainable import ratio_bound

BASELINES = ("orca-max", "orca-pow2", "orca-oracle")
# Figures 14-15 (OPT-13B, Alpaca): memory saving by sharing, %.


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _num(x, spec: str = ".3g") -> str:
    return "n/a" if x is None or pd.isna(x) else format(x, spec)


def _pct(x) -> str:
    return "n/a" if x is None or pd.isna(x) else f"{100 * x:.1f}"


def load_capacity(experiments: Path, name: str) -> pd.DataFrame | None:
    path = experiments / name / CAPACITY_CSV
    return pd.read_csv(path) if path.is_file() else None


def load_aggregate(experiments: Path, name: str) -> pd.DataFrame | None:
    path = experiments / name / "aggregate.parquet"
    return pd.read_parquet(path) if path.is_file() else None


def setting(workload: str) -> str:
    """"alpaca_synthetic_beam4" -> "beam4"; "..._n2" -> "n2"; "translation_5shot" -> "5shot"; else "n1"."""
    match = re.search(r"_(n\d+|beam\d+|\d+shot)$", str(workload))
    return match.group(1) if match else "n1"


def bound_note(bound: str) -> str:
    """What follows a figure that is only a bound: ", lower bound" or ", upper bound"; "" when it is exact."""
    return "" if bound == "=" else f", {BOUND_WORDS[bound]}"


def capacity_warnings(cap: pd.DataFrame, folder: Path | None = None) -> list[str]:
    """The one warning line of a capacity table (in `folder`) some of whose capacities are only bounds; [] if none."""
    warning = bound_warning(cap)
    if warning is None:
        return []
    return [f"{shown(folder / CAPACITY_CSV)}: {warning}" if folder is not None else warning]


def _ratio(per_seed: pd.Series) -> str:
    """Mean ratio over seeds, with min-max when there are several: "1.85x (1.80-1.90)"."""
    per_seed = per_seed.dropna()
    if not len(per_seed):
        return "n/a"
    text = f"{per_seed.mean():.2f}x"
    return text + (f" ({per_seed.min():.2f}-{per_seed.max():.2f})" if len(per_seed) > 1 else "")


LIMIT_WORDS = {"memory": "memory", "max_num_seqs": "row cap", "token_budget": "token budget"}


def binding_limit(runs: pd.DataFrame) -> str:
    """Which limit kept waiting requests out in the runs at capacity (mean over seeds of each limit's share of the
    steady window's iterations with a queue), with the KV left free: "row cap 97%, KV 45% free"; "n/a" for a
    capacity table written before these were recorded."""
    columns = [f"blocked_by_{limit}_at_capacity" for limit in LIMIT_WORDS]
    if not len(runs) or any(c not in runs for c in columns) or runs[columns].isna().all().all():
        return "n/a"
    shares = runs[columns].mean()
    top = shares.idxmax()
    if not shares[top] > 0:
        return "none (no queue)"
    limit = top.removeprefix("blocked_by_").removesuffix("_at_capacity")
    free = runs["mem_free_at_capacity"].mean() if "mem_free_at_capacity" in runs else float("nan")
    return f"{LIMIT_WORDS[limit]} {100 * shares[top]:.0f}%, KV {_pct(free)}% free"


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
        cells = [_num(caps.get(e)) + (bound_note(combined_bound(bounds[e])) if e in bounds else "")
                 for e in (*BASELINES, "paged")]
        ratios = [_ratio(seeds["paged"] / seeds[b]) + bound_note(combined_bound(map(ratio_bound, bounds["paged"],
                                                                                     bounds[b])))
                  if "paged" in seeds and b in seeds else "n/a" for b in BASELINES]
        paged = group[group["engine"] == "paged"]
        saving = paged["memory_saving_at_capacity"].mean() if len(paged) else None
        key = setting(workload)
        row = [key] + cells + ratios
        row.append(_pct(saving))
        row.append(binding_limit(paged))
        if paper_saving is not None:
            row.append(_num(paper_saving.get(key)) if key in paper_saving else "-")
        rows.append(row)
    return rows


def before_cell(experiment: str, key: str, saving: bool = True) -> str:
    """This setting's paged / Orca (Oracle) ratio (and saving %) before the sharing figures' revision."""
    b = sharing_before()
    ratio = b.ratio_oracle.get(experiment, {}).get(key)
    cells = [f"{ratio:.2f}x" if ratio is not None else "-"]
    if saving:
        value = b.saving.get(experiment, {}).get(key)
        cells.append(f"{value:.1f}" if value is not None else "-")
    return ", ".join(cells)


SEQ_CAP = 1024   # the raised row cap of the *_seqcap sweeps


def raised_cap(experiments: Path, name: str, label: str, header: list[str], section: Section) -> str:
    """The same search with `limits.max_num_seqs` raised (outputs/experiments/NAME_seqcap), so that memory, not
    the row cap, limits the paged engine: the text, or "" and a NotRun when it has no runs."""
    folder = f"{name}_seqcap"
    command = f"python run.py -m experiment={name} limits.max_num_seqs={SEQ_CAP} experiment_name={folder}"
    cap = load_capacity(experiments, folder)
    if cap is None:
        section.not_run.append(NotRun(f"{label} with the row cap raised to {SEQ_CAP}", command, experiments / folder))
        return ""
    section.warnings += capacity_warnings(cap, experiments / folder)
    return (f"With the row cap raised from 256 to {SEQ_CAP} sequences (`{command}`), the limit that binds the "
            "paged engine and the ratios become:\n\n" + _table(header, capacity_rows(cap, "latency")) + "\n")


def section_sampling(experiments: Path) -> Section:
    head = ("## Parallel sampling and beam search (Figures 14-15)\n\n"
            "Each request runs n samples or a beam of w sequences, admitted, scheduled, preempted and finished "
            "together. The paged engine stores their prompt once (reference-counted blocks; a row writing into a "
            "shared block copies it first) and, for beams, shares every block of their common history; the Orca "
            "baselines reserve one region per sequence by their rule and copy a beam's history between regions "
            "when the beams are re-chosen. Every copy costs device time on both backends (2 x tokens x KV bytes "
            "at the device's bandwidth in the sim). Groups are swapped, never recomputed, when preempted (vLLM's "
            "rule), to 64 GiB of host memory. Capacity at mean normalized latency <= 0.2 s/token (the search of "
            "the capacity section), OPT-13B on one A100-40GB, sim backend, Alpaca, 10-minute Poisson traces, "
            "seeds 0-2 (capacities: mean; ratios: mean (min-max) of the per-seed ratios). Memory saving: KV "
            "slots the paged engine saved by sharing / slots its sequences would hold without sharing, "
            "time-averaged over the steady window of the run at its capacity (mean over seeds).\n\n")
    parts, section = [head], Section()
    header = ["setting", *BASELINES, "paged", "paged/max", "paged/pow2", "paged/oracle", "saving %",
              "paged's binding limit", "paper saving %", f"before ({sharing_before().commit}): paged/oracle, saving %"]
    for name, label in (("sampling", "Parallel sampling"), ("beam", "Beam search")):
        cap = load_capacity(experiments, name)
        command = f"`python run.py -m experiment={name}` (`python -m results.sweeps.capacity outputs/experiments/{name}`)"
        if cap is None:
            section.not_run.append(experiment_not_run(f"{label} (Figures 14-15)", name, experiments))
            continue
        section.has_runs = True
        section.warnings += capacity_warnings(cap, experiments / name)
        rows = [r + [before_cell(name, r[0])] for r in capacity_rows(cap, "latency", paper().saving_alpaca)]
        parts.append(f"**{label}**, {command}, capacity in req/s:\n\n" + _table(header, rows) + "\n")
        good = capacity_rows(cap, "goodput")
        parts.append("Under the goodput criterion (90% of requests within TTFT <= 1 s and TPOT <= 0.1 s), "
                     "paged / oracle: " + ", ".join(f"{r[0]} {r[7]}" for r in good) + ".\n")
        parts.append(raised_cap(experiments, name, label, header[:-2], section))
    parts.append(trace_length_check(experiments))
    long = load_capacity(experiments, "sampling_1h")
    if long is None and section.has_runs:
        section.not_run.append(NotRun("Parallel sampling on one-hour traces (Figures 14-15)", LONG_TRACE_COMMAND,
                                      experiments / "sampling_1h"))
    elif long is not None:
        section.warnings += capacity_warnings(long, experiments / "sampling_1h")
    parts.append("The paper: parallel sampling saves 6.1-9.8% of KV memory on Alpaca and 16.2-30.5% on "
                 "ShareGPT; beam search 37.6-55.2% and 44.3-66.3%; the throughput gain over Orca (Oracle) grows "
                 "from 1.3x (basic sampling) to 2.3x (beam width 6).\n")
    saving = load_capacity(experiments, "saving")
    if saving is None:
        section.not_run.append(experiment_not_run("ShareGPT memory saving (Figures 14-15)", "saving", experiments))
    else:
        section.has_runs = True
        section.warnings += capacity_warnings(saving, experiments / "saving")
        rows = []
        for workload, g in saving[saving["criterion"].str.startswith("latency")].groupby("workload", sort=False):
            key = setting(workload)
            paper_range = paper().saving_sharegpt["beam" if key.startswith("beam") else "n"]
            before = sharing_before().saving.get("saving", {}).get(key)
            rows.append([key, _num(g["capacity"].mean()) + bound_note(combined_bound(g["bound"])),
                         _pct(g["memory_saving_at_capacity"].mean()),
                         _num(g["batch_size_at_capacity"].mean()), paper_range,
                         "-" if before is None else f"{before:.1f}"])
        parts.append("**ShareGPT memory saving**, `python run.py -m experiment=saving` (the paged engine's "
                     "capacity search; the saving in the run at its capacity):\n\n"
                     + _table(["setting", "paged capacity (req/s)", "saving %", "mean batch (requests)",
                               "paper saving % (range over n or width)",
                               f"saving % before ({sharing_before().commit})"], rows) + "\n")
    check = section_beam_check(experiments.parent / "beam_check" / "beam_check.csv")
    parts.append(check.text)
    section.has_runs |= check.has_runs
    section.not_run += check.not_run
    if section.has_runs:
        section.text = "\n".join(p for p in parts if p)
    return section


LONG_TRACE_COMMAND = ("python run.py -m hydra/sweeper=capacity hydra/launcher=local backend=sim "
                      "engine=orca_oracle,paged workload=alpaca sampling=none,n2,n4,n6 workload.arrival=poisson "
                      "workload.duration_s=3600 workload.seed=0 engine.swap_space=64 "
                      "hydra.sweep.dir=outputs/experiments/sampling_1h")


def trace_length_check(experiments: Path) -> str:
    """Parallel sampling's paged / oracle ratio on one-hour traces against the 10-minute ones, seed 0."""
    long, short = load_capacity(experiments, "sampling_1h"), load_capacity(experiments, "sampling")
    if long is None or short is None:
        return ""

    def ratio(table: pd.DataFrame, workload: str) -> str:
        t = table[(table["workload"] == workload) & (table["seed"] == 0) & table["criterion"].str.startswith("latency")]
        caps, bounds = t.set_index("engine")["capacity"], t.set_index("engine")["bound"]
        value = caps.get("paged", float("nan")) / caps.get("orca-oracle", float("nan"))
        return _num(value, ".2f") + "x" + bound_note(ratio_bound(bounds.get("paged", "="), bounds.get("orca-oracle", "=")))

    rows = [[setting(w), ratio(short, w), ratio(long, w)]
            for w in long["workload"].drop_duplicates()]
    return ("Do the 10-minute traces change the answer? The same search on one-hour traces (the paper's), seed 0, "
            f"paged / orca-oracle at 0.2 s/token (`{LONG_TRACE_COMMAND}`):\n\n"
            + _table(["setting", "10-minute traces", "one-hour traces"], rows) + "\n")


def section_beam_check(path: Path) -> Section:
    head = ("**The sim's beam model against the real beam search**, `python -m studies.beam_check` (32 Alpaca "
            "requests at t = 0, the tiny model with random weights on this CPU, the paged engine, 16 MiB of KV; "
            "then the sim on the same requests and KV slots). The sim draws each new beam's parent rank r with "
            "probability proportional to decay^r (`engines/sim/beam_model.py`); the decay is fitted to the real "
            "search's ranks, and the experiments above use the default 1.0 (uniform).\n\n")
    if not path.is_file():
        return Section(not_run=[NotRun("The sim's beam model against the real beam search (Figures 14-15)",
                                       f"python -m studies.beam_check --out {shown(path.parent)}", path.parent)])
    t = pd.read_csv(path)
    rows = [[str(int(r.beam_width)), _num(r.fitted_decay, ".2f"), _num(r.real_distinct_parents, ".2f"),
             _num(r.model_distinct_parents, ".2f"), _pct(r.real_saving), _pct(r.sim_saving_fitted),
             _pct(r.sim_saving_decay_1)] for r in t.itertuples()]
    gap_fit = 100 * (t["sim_saving_fitted"] - t["real_saving"]).abs().max()
    gap_one = 100 * (t["sim_saving_decay_1"] - t["real_saving"]).abs().max()
    return Section(head + _table(["width", "fitted decay", "distinct parents / step (real)", "(model)",
                           "saving % real", "sim, fitted decay", "sim, decay 1"], rows)
            + f"\n\nOn the same requests the sim's saving is within {gap_fit:.1f} points of the real search's with "
              f"the fitted decay and within {gap_one:.1f} with the default, at every width: the model reproduces "
              "how beam survival turns into shared blocks. What it cannot know is how a trained model's beams "
              "branch: the paper's beam savings (trained OPT-13B) are lower than both this random-weight model's "
              "and the sim's, so its beams' histories merge more slowly.\n", has_runs=True)


def section_prefix(experiments: Path) -> Section:
    head = ("## Shared prefix (Figure 16)\n\n`python run.py -m experiment=prefix`: translation requests behind one "
            "shared few-shot prefix (1-shot: 80 tokens, 5-shot: 341), LLaMA-13B on one A100-40GB, sim backend, "
            "10-minute Poisson traces, seeds 0-2. The paged engine computes the prefix once and maps every later "
            "request's first blocks to its cached blocks (whole blocks only: 80 tokens = 5 blocks of 16; 341 = 21 "
            "blocks, the last 5 tokens recomputed); only the rest of each prompt is prefilled, attending over the "
            "cached part (`kernels/reference.py: prefix_prefill_attention` and its Triton kernel). The Orca "
            "baselines prefill and store the whole prompt. **The sentences are generated from stated statistics "
            "(`workloads/translation.py`: source lengths lognormal with mean 28 tokens, targets x1.1), not WMT16 "
            "data**, which cannot be fetched here.\n\n")
    cap = load_capacity(experiments, "prefix")
    if cap is None:
        return Section(not_run=[experiment_not_run("Shared prefix (Figure 16)", "prefix", experiments)])
    header = ["prefix", *BASELINES, "paged", "paged/max", "paged/pow2", "paged/oracle", "saving %",
              "paged's binding limit", "paper paged/oracle", f"before ({sharing_before().commit}): paged/oracle"]
    paper_ratio = {f"{k}shot": f"{v}x" for k, v in paper().prefix_ratio.items()}
    rows = capacity_rows(cap, "latency")
    for r in rows:
        r += [paper_ratio.get(r[0], "-"), before_cell("prefix", r[0], saving=False)]
    return Section(head + "Capacity (req/s) at mean normalized latency <= 0.2 s/token:\n\n" + _table(header, rows)
                   + "\n", has_runs=True, warnings=capacity_warnings(cap, experiments / "prefix"))


def section_chat(experiments: Path) -> Section:
    head = ("## Chatbot (Figure 17)\n\n`python run.py -m experiment=chat`: each request is a ShareGPT conversation "
            "so far, cut to its last 1,024 tokens, and the next reply, at most 1,024 tokens (`workloads/chat.py`); "
            "OPT-13B on one A100-40GB, sim backend, one-hour Poisson traces, seeds 0-2. The paper: vLLM sustains 2x "
            "the request rate of every Orca variant.\n\n")
    cap = load_capacity(experiments, "chat")
    if cap is None:
        return Section(not_run=[experiment_not_run("Chatbot (Figure 17)", "chat", experiments)])
    header = ["criterion", *BASELINES, "paged", "paged/max", "paged/pow2", "paged/oracle",
              f"before ({sharing_before().commit}): paged/oracle"]
    rows = []
    for crit in ("latency", "goodput"):
        for r in capacity_rows(cap, crit):
            rows.append([crit] + r[1:8] + [before_cell("chat", "n1", saving=False) if crit == "latency" else "-"])
    return Section(head + "Capacity (req/s):\n\n" + _table(header, rows) + "\n", has_runs=True,
                   warnings=capacity_warnings(cap, experiments / "chat"))


def section_swap(experiments: Path, swap_bench: Path) -> Section:
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
    rows = [[str(int(r["block_size"])), _num(r["swap_one_way_ms"], ".1f"), _num(r["recompute_ms"], ".1f"),
             _num(r["recompute_over_swap"], ".2f")] for r in costs]
    parts = [head, "**Figure 19a on the sim**, `python -m studies.swap_cost` (OPT-13B, A100-40GB, 1,024 tokens):\n\n"
             + _table(["block size", "swap one way (ms)", "recompute (ms)", "recompute / swap"], rows) + "\n"]
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
        rows = [[str(int(r.block_size)), _num(r.swap_out_ms, ".2f"), _num(r.swap_in_ms, ".2f"),
                 _num(r.recompute_ms, ".0f")] for r in b.itertuples()]
        parts.append(f"**Figure 19a on this machine's CPU**, `python -m studies.swap_bench --out "
                     f"{swap_bench.relative_to(swap_bench.parents[1])}` ({meta.get('model', 'tiny')} model, "
                     f"{int(b['tokens'].iloc[0])} tokens, {meta.get('dtype', '')}; a CPU's \"host link\" is a memcpy "
                     f"in RAM, and recomputation is slow on 2 cores; fitted: "
                     f"{1e6 * meta.get('fit_host_transfer_latency_s', float('nan')):.1f} us per transfer):\n\n"
                     + _table(["block size", "swap out (ms)", "swap in (ms)", "recompute (ms)"], rows) + "\n")
    cap = load_capacity(experiments, "swap_capacity")
    if cap is None:
        section.not_run.append(experiment_not_run("Swapping: Figure 19b as capacities", "swap_capacity", experiments))
    else:
        section.has_runs = True
        section.warnings += capacity_warnings(cap, experiments / "swap_capacity")
        parts.append("**Figure 19b as capacities**, `python run.py -m experiment=swap_capacity` (the paged "
                     "engine's capacity at each block size and policy, mean normalized latency <= 0.2 s/token, "
                     "ShareGPT, 10-minute Poisson traces, seeds 0-2; req/s, mean (min-max)):\n\n"
                     + _table(["block size", "swap", "recompute", "swap / recompute"], swap_capacity_rows(cap))
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
                     + _table(["block size", "req/s", "swap: latency", "swap: preemptions", "recompute: latency",
                               "recompute: preemptions", f"before ({before.commit}): swap / recompute"], rows) + "\n")
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
        ratio = _ratio(seeds["swap"] / seeds["recompute"]) if {"swap", "recompute"} <= set(seeds) else "n/a"
        rows.append([str(int(bs)), *cells, ratio])
    return rows


def preemption_rows(agg: pd.DataFrame, metric: str, spec: str) -> list[list[str]]:
    """Per block size: its request rate, `metric` and the preemptions, preempting by swap and by recompute."""
    rows = []
    for bs, g in agg.groupby("block_size"):
        by = {p: s.iloc[0] for p, s in g.groupby("preemption")}
        rate = g["request_rate"].iloc[0] if "request_rate" in g else None
        cells = [_num(rate)]
        for p in ("swap", "recompute"):
            s = by.get(p)
            cells += ["n/a", "n/a"] if s is None else [_num(s[metric], spec), _num(s["num_preemptions"], ".0f")]
        rows.append([str(int(bs)), *cells])
    return rows


REAL = (("sampling_real", "Figure 14: parallel samples"), ("beam_real", "Figure 15: beam search"),
        ("prefix_real", "Figure 16: shared prefix"), ("chat_real", "Figure 17: chat"))


def section_real_sharing(experiments: Path) -> Section:
    head = ("## Sharing and swapping on the real CPU backend (small scale)\n\n"
            "The tiny OPT model (random weights, fp32) on this machine's 2 cores, every request at t = 0, a small "
            "KV budget so memory binds (each experiment's file in `conf/experiment/` says its trace and budget). "
            "Every engine generates the same tokens for the same request (tests/real/test_sharing_real.py), so "
            "the engines differ only in batching and memory. Wall-clock throughput on a CPU grows little with "
            "the batch (see the real backend section), so the ratios here are far below a GPU's. A request whose "
            "sequences no state of an engine's memory could hold is rejected on arrival by that engine (the same "
            "rule for every engine; what fits differs: `rejected`).\n\n")
    parts, section = [head], Section()
    for name, label in REAL:
        agg = load_aggregate(experiments, name)
        if agg is None:
            section.not_run.append(experiment_not_run(f"Real CPU backend, {label}", name, experiments))
            continue
        section.has_runs = True
        rows = []
        for workload, g in agg.groupby("workload", sort=False):
            by = {e: s.iloc[0] for e, s in g.groupby("engine")}
            paged = by.get("paged")
            for engine, s in sorted(by.items(), key=lambda kv: kv[0] == "paged"):
                ratio = (paged["output_tokens_per_s"] / s["output_tokens_per_s"]
                         if paged is not None and engine != "paged" else None)
                rows.append([setting(workload), engine, _num(s["output_tokens_per_s"], ".1f"),
                             _num(s["mean_batch_size"], ".1f"), _pct(s.get("memory_saving")),
                             _num(s["num_preemptions"], ".0f"), _num(s.get("num_rejected"), ".0f"),
                             _num(ratio, ".2f") + "x" if ratio else "-"])
        parts.append(f"**{label}**, `python run.py -m experiment={name}`:\n\n"
                     + _table(["setting", "engine", "output tok/s", "mean batch (requests)", "saving %",
                               "preemptions", "rejected", "paged / this"], rows) + "\n")
    agg = load_aggregate(experiments, "swap_real")
    if agg is None:
        section.not_run.append(experiment_not_run("Real CPU backend, Figure 19b: swap vs recompute", "swap_real",
                                                  experiments))
    else:
        section.has_runs = True
        rows = preemption_rows(agg, "output_tokens_per_s", ".1f")
        parts.append("**Figure 19b: swap vs recompute**, `python run.py -m experiment=swap_real`:\n\n"
                     + _table(["block size", "req/s", "swap: output tok/s", "swap: preemptions",
                               "recompute: output tok/s", "recompute: preemptions"], rows) + "\n")
    if section.has_runs:
        section.text = "\n".join(parts)
    return section
