"""The report's sections on sharing (the paper's Figures 14-17), read from run folders.

Each section reads the capacity table (`capacity.csv`) or the aggregate of its
experiment under outputs/experiments/NAME, and sets the paper's numbers
beside ours; a part without runs is left out and named (`section.NotRun`).
A capacity that is only a bound says so in words ("6, lower bound"), as does
a ratio with one in it. `results.report.write` puts them in the report; the beam model's sections are in
`beams`, swapping's (Figure 19) in `swapping`.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from results.report.beams import section_beam_check, section_persistence
from results.report.bounds import bound_note, capacity_part, capacity_warnings, ratio_cell
from results.report.markdown import num, pct, table
from results.report.paper import paper, sharing_before
from results.report.distribution_plots import plot_latency_distributions, runs_at_rate
from results.report.read import load, load_aggregate, load_capacity
from results.report.section import NotRun, Section, experiment_not_run
from results.report.sharing_plots import (plot_beam, plot_chat, plot_prefix, plot_sampling, plot_sharegpt_saving,
                                          setting)
from results.report.swapping import preemption_rows
from results.sweeps.capacity import combined_bound
from results.sweeps.sustainable import ratio_bound

BASELINES = ("orca-max", "orca-pow2", "orca-oracle")
# Figures 14-15 (OPT-13B, Alpaca): memory saving by sharing, %.


LIMIT_WORDS = {"memory": "memory", "max_num_seqs": "row cap", "token_budget": "token budget"}


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


def before_cell(experiment: str, key: str, saving: bool = True) -> str:
    """This setting's paged / Orca (Oracle) ratio (and saving %) before the sharing figures' revision."""
    b = sharing_before()
    ratio = b.ratio_oracle.get(experiment, {}).get(key)
    cells = [f"{ratio:.2f}x" if ratio is not None else "-"]
    if saving:
        value = b.saving.get(experiment, {}).get(key)
        cells.append(f"{value:.1f}" if value is not None else "-")
    return ", ".join(cells)


DISTRIBUTION_RATE = 1.0   # req/s: every engine's capacity search probes its start rate, on every seed


def latency_distributions(experiments: Path, figures: Path | None) -> str:
    """TTFT and TPOT per engine at one rate, beam width 2 (the beam search's runs at DISTRIBUTION_RATE)."""
    runs = load(experiments, "beam")
    if figures is None or runs is None:
        return ""
    dirs = runs_at_rate(experiments / "beam", runs, DISTRIBUTION_RATE, "alpaca_synthetic_beam2")
    if not dirs or plot_latency_distributions(dirs, Path(figures) / "latency_distributions.png") is None:
        return ""
    return (f"TTFT and TPOT of each engine's requests at {DISTRIBUTION_RATE:g} req/s, beam width 2 (every seed's "
            "run of the beam search at that rate, steady window):\n\n"
            "![TTFT and TPOT distributions](figures/latency_distributions.png)\n")


def figure_link(figures: Path | None, name: str, plot, table_) -> str:
    """Draw `plot(table_)` into figures/NAME.png and return its markdown link ("" with nothing drawn)."""
    if figures is None or plot(table_, Path(figures) / f"{name}.png") is None:
        return ""
    return f"\n![{name}](figures/{name}.png)\n"


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
    slots = [load_aggregate(experiments, n) for n in (name, folder)]
    slots = [sorted(a["kv_budget_slots"].dropna().unique()) if a is not None and "kv_budget_slots" in a else []
             for a in slots]
    budgets = (f"; the activation reserve grows with it, so the KV budget goes from {slots[0][0]:,.0f} to "
               f"{slots[1][0]:,.0f} slots" if all(len(x) == 1 for x in slots) and slots[0] != slots[1] else "")
    return (f"With the row cap raised from 256 to {SEQ_CAP} sequences (`{command}`), the limit that binds the "
            f"paged engine and the ratios become as below (every engine runs with the raised cap{budgets}). Where "
            "a limit's share is small, the other waiting iterations waited for swapped groups to come back first: "
            "memory binds, through preemption.\n\n" + table(header, capacity_rows(cap, "latency")) + "\n")


def section_sampling(experiments: Path, figures: Path | None = None) -> Section:
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
        cap = capacity_part(experiments, name, f"{label} (Figures 14-15)", section)
        if cap is None:
            continue
        command = f"`python run.py -m experiment={name}` (`python -m results.sweeps.capacity outputs/experiments/{name}`)"
        rows = [r + [before_cell(name, r[0])] for r in capacity_rows(cap, "latency", paper().saving_alpaca)]
        parts.append(f"**{label}**, {command}, capacity in req/s:\n\n" + table(header, rows) + "\n"
                     + figure_link(figures, name, plot_sampling if name == "sampling" else plot_beam, cap))
        good = capacity_rows(cap, "goodput")
        parts.append("Under the goodput criterion (90% of requests within TTFT <= 1 s and TPOT <= 0.1 s), "
                     "paged / oracle: " + ", ".join(f"{r[0]} {r[7]}" for r in good) + ".\n")
        parts.append(raised_cap(experiments, name, label, header[:-2], section))
        if name == "beam":
            parts.append(latency_distributions(experiments, figures))
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
    saving = capacity_part(experiments, "saving", "ShareGPT memory saving (Figures 14-15)", section)
    if saving is not None:
        rows = []
        for workload, g in saving[saving["criterion"].str.startswith("latency")].groupby("workload", sort=False):
            key = setting(workload)
            paper_range = paper().saving_sharegpt["beam" if key.startswith("beam") else "n"]
            before = sharing_before().saving.get("saving", {}).get(key)
            rows.append([key, num(g["capacity"].mean()) + bound_note(combined_bound(g["bound"])),
                         pct(g["memory_saving_at_capacity"].mean()),
                         num(g["batch_size_at_capacity"].mean()), paper_range,
                         "-" if before is None else f"{before:.1f}"])
        parts.append("**ShareGPT memory saving**, `python run.py -m experiment=saving` (the paged engine's "
                     "capacity search; the saving in the run at its capacity):\n\n"
                     + table(["setting", "paged capacity (req/s)", "saving %", "mean batch (requests)",
                               "paper saving % (range over n or width)",
                               f"saving % before ({sharing_before().commit})"], rows) + "\n"
                     + figure_link(figures, "saving", plot_sharegpt_saving, saving))
    for check in (section_persistence(experiments.parent / "beam_persistence" / "persistence.csv"),
                  section_beam_check(experiments.parent / "beam_check" / "beam_check.csv")):
        parts.append(check.text)
        section.has_runs |= check.has_runs
        section.not_run += check.not_run
    if section.has_runs:
        section.text = "\n".join(p for p in parts if p)
    return section


LONG_TRACE_COMMAND = ("python run.py -m hydra/sweeper=capacity hydra/launcher=local backend=sim "
                      "engine=orca_oracle,paged workload=alpaca sampling=none,n2,n4,n6 workload.arrival=poisson "
                      "workload.duration_s=3600 workload.seed=0 swap_space=64 "
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
        return num(value, ".2f") + "x" + bound_note(ratio_bound(bounds.get("paged", "="), bounds.get("orca-oracle", "=")))

    rows = [[setting(w), ratio(short, w), ratio(long, w)]
            for w in long["workload"].drop_duplicates()]
    return ("Do the 10-minute traces change the answer? The same search on one-hour traces (the paper's), seed 0, "
            f"paged / orca-oracle at 0.2 s/token (`{LONG_TRACE_COMMAND}`):\n\n"
            + table(["setting", "10-minute traces", "one-hour traces"], rows) + "\n")


def section_prefix(experiments: Path, figures: Path | None = None) -> Section:
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
    return Section(head + "Capacity (req/s) at mean normalized latency <= 0.2 s/token:\n\n" + table(header, rows)
                   + "\n" + figure_link(figures, "prefix", plot_prefix, cap), has_runs=True,
                   warnings=capacity_warnings(cap, experiments / "prefix"))


def section_chat(experiments: Path, figures: Path | None = None) -> Section:
    head = ("## Chatbot (Figure 17)\n\n`python run.py -m experiment=chat`: each request is a ShareGPT conversation "
            "so far, cut to its last 1,024 tokens, and the next reply, at most 1,024 tokens (`workloads/chat.py`); "
            "OPT-13B on one A100-40GB, sim backend, one-hour Poisson traces, seeds 0-2. The paper: vLLM sustains 2x "
            "the request rate of every Orca variant, whose figures coincide because most prompts reach the cut.\n\n"
            "The packaged ShareGPT file splits every long conversation into records of about 2,048 tokens; taken "
            "one record at a time (`workload.chat_history=record`, the previous revision) a reply's history stops "
            "at its record's start, and 35% of prompts reached the cut. Joined back into whole conversations (the "
            "default, `conversation`: a record continues the one before it when its id and overlapping turns "
            "match), 61.5% do (`python -m workloads.stats chat`; `docs/chat_trace.md`). A prompt at the cut "
            "needs 1,024 + output > 1,024 slots, which Orca's buddy allocator rounds to 2,048 under all three "
            "reservations, so the Orca variants come together; the requests below the cut (mostly early rounds) "
            "still let pow2 and oracle take less. The packaged file holds only the dataset's first 17,671 records, "
            "and OPT's GPT-2 tokenizer cannot be loaded offline (cl100k_base counts fewer tokens), so fewer "
            "prompts reach the cut than in the paper.\n\n")
    cap = load_capacity(experiments, "chat")
    if cap is None:
        return Section(not_run=[experiment_not_run("Chatbot (Figure 17)", "chat", experiments)])
    header = ["criterion", *BASELINES, "paged", "paged/max", "paged/pow2", "paged/oracle",
              f"before ({sharing_before().commit}): paged/oracle"]
    rows = []
    for crit in ("latency", "goodput"):
        for r in capacity_rows(cap, crit):
            rows.append([crit] + r[1:8] + [before_cell("chat", "n1", saving=False) if crit == "latency" else "-"])
    return Section(head + "Capacity (req/s):\n\n" + table(header, rows) + "\n"
                   + figure_link(figures, "chat", plot_chat, cap), has_runs=True,
                   warnings=capacity_warnings(cap, experiments / "chat"))


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
                rows.append([setting(workload), engine, num(s["output_tokens_per_s"], ".1f"),
                             num(s["mean_batch_size"], ".1f"), pct(s.get("memory_saving")),
                             num(s["num_preemptions"], ".0f"), num(s.get("num_rejected"), ".0f"),
                             num(ratio, ".2f") + "x" if ratio else "-"])
        parts.append(f"**{label}**, `python run.py -m experiment={name}`:\n\n"
                     + table(["setting", "engine", "output tok/s", "mean batch (requests)", "saving %",
                               "preemptions", "rejected", "paged / this"], rows) + "\n")
    agg = load_aggregate(experiments, "swap_real")
    if agg is None:
        section.not_run.append(experiment_not_run("Real CPU backend, Figure 19b: swap vs recompute", "swap_real",
                                                  experiments))
    else:
        section.has_runs = True
        rows = preemption_rows(agg, "output_tokens_per_s", ".1f")
        parts.append("**Figure 19b: swap vs recompute**, `python run.py -m experiment=swap_real`:\n\n"
                     + table(["block size", "req/s", "swap: output tok/s", "swap: preemptions",
                               "recompute: output tok/s", "recompute: preemptions"], rows) + "\n")
    if section.has_runs:
        section.text = "\n".join(parts)
    return section
