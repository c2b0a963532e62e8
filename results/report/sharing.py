"""The report's sections on sharing (the paper's Figures 14-17), read from run folders.

Each section reads the capacity table (`capacity.csv`) or the aggregate of its
experiment under outputs/experiments/NAME, and sets the paper's numbers
beside ours; a part without runs is left out and named by its step of the build
(`section.step_not_run`). A capacity that is only a bound says so in words ("6, lower bound"), as does
a ratio with one in it. The code computes the tables, the figures and the values the prose quotes; the prose
is in docs/report/templates/sharing_*.md.j2, the paper's numbers in data/reference/paper.yaml, the criteria in
the config (`criteria`), the commands in docs/report/steps.yaml. `pagedbench.results.report.write` puts the sections in
the report; the beam model's check against the real backend is in `beams`, swapping's (Figure 19) in `swapping`;
the tables this module shares with them and with the README's block (`capacity_rows`, `preemption_rows`) are in
`tables`. Beam persistence's calibration (`section_persistence`) is part of the parallel sampling section.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from pagedbench.engines.sim.build import SimBackendConfig
from pagedbench.results.record.identity import RUN_RECORD
from pagedbench.results.report.bounds import bound_note, capacity_part, capacity_warnings
from pagedbench.results.report.criteria import criteria
from pagedbench.results.report.distribution_plots import plot_latency_distributions, runs_at_rate
from pagedbench.results.report.markdown import num, pct, table
from pagedbench.results.report.paper import paper, reference, sharing_before
from pagedbench.results.report.read import load, load_aggregate, load_capacity
from pagedbench.results.report.section import Section, shown, step_not_run, typed_command
from pagedbench.results.report.setup import trace_setup
from pagedbench.results.report.sharing_plots import (plot_beam, plot_chat, plot_prefix, plot_sampling, plot_sharegpt_saving,
                                          setting)
from pagedbench.results.report.steps import step
from pagedbench.results.report.tables import (BASELINES, ORACLE, ORACLE_RATIO, RATIOS, SAVING, capacity_rows,
                                              preemption_rows)
from pagedbench.results.report.template import render
from pagedbench.results.sweeps.capacity import combined_bound
from pagedbench.results.sweeps.sustainable import ratio_bound

ROW_CAP = "limits.max_num_seqs"
DISTRIBUTION_WORKLOAD = "alpaca_synthetic_beam2"   # the beam search's setting whose latencies are drawn
REAL = ("sampling_real", "beam_real", "prefix_real", "chat_real")   # the real CPU backend's steps, Figures 14-17
REAL_PART = "Real CPU backend, "   # how their steps' titles start; the rest names the part in the section


def before_cell(experiment: str, key: str, saving: bool = True) -> str:
    """This setting's paged / Orca (Oracle) ratio (and saving %) before the sharing figures' revision."""
    b = sharing_before()
    ratio = b.ratio_oracle.get(experiment, {}).get(key)
    cells = [f"{ratio:.2f}x" if ratio is not None else "-"]
    if saving:
        value = b.saving.get(experiment, {}).get(key)
        cells.append(f"{value:.1f}" if value is not None else "-")
    return ", ".join(cells)


def latency_distributions(experiments: Path, figures: Path | None, workload: str = DISTRIBUTION_WORKLOAD) -> str:
    """TTFT and TPOT per engine at one rate, one beam width (`workload`): the beam search's runs at the capacity
    search's start rate, which every engine's search probes, on every seed."""
    runs = load(experiments, "beam")
    if figures is None or runs is None:
        return ""
    rate = criteria().start_rate
    dirs = runs_at_rate(experiments / "beam", runs, rate, workload)
    if not dirs or plot_latency_distributions(dirs, Path(figures) / "latency_distributions.png") is None:
        return ""
    return render("sharing_distributions.md.j2", rate=rate, width=setting(workload).removeprefix("beam"))


def figure(figures: Path | None, name: str, plot, table_) -> str:
    """Draw `plot(table_)` into figures/NAME.png: NAME, or "" with nothing drawn (the templates link it)."""
    if figures is None or plot(table_, Path(figures) / f"{name}.png") is None:
        return ""
    return name


def row_cap(experiments: Path, name: str) -> int | None:
    """The row cap (`limits.max_num_seqs`) that the runs of outputs/experiments/NAME ran with, from their records'
    config (each run's run.json); None without runs, or when their caps differ."""
    agg = load_aggregate(experiments, name)
    caps = set()
    for run_dir in [] if agg is None or "run_dir" not in agg else agg["run_dir"].dropna().unique():
        try:
            config = json.loads((experiments / name / str(run_dir) / RUN_RECORD).read_text())["config"]
            caps.add(int(config["limits"]["max_num_seqs"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return caps.pop() if len(caps) == 1 else None


def command_value(name: str, key: str) -> str | None:
    """The value that the command of the build's step NAME gives `key` (its argument `key=value`), or None."""
    return next((a.split("=", 1)[1] for a in step(name).command if a.startswith(key + "=")), None)


def raised_cap(experiments: Path, name: str, header: list[str], section: Section) -> str:
    """The same search with `limits.max_num_seqs` raised (outputs/experiments/NAME_seqcap, the step NAME_seqcap),
    so that memory, not the row cap, limits the paged engine: the text, or "" and the step named as not run."""
    folder = f"{name}_seqcap"
    cap = load_capacity(experiments, folder)
    if cap is None:
        section.not_run.append(step_not_run(folder, experiments.parent))
        return ""
    section.warnings += capacity_warnings(cap, experiments / folder)
    slots = [load_aggregate(experiments, n) for n in (name, folder)]
    slots = [sorted(a["kv_budget_slots"].dropna().unique()) if a is not None and "kv_budget_slots" in a else []
             for a in slots]
    budgets = (slots[0][0], slots[1][0]) if all(len(x) == 1 for x in slots) and slots[0] != slots[1] else None
    return render("sharing_raised_cap.md.j2", command=typed_command(folder), base=row_cap(experiments, name),
                  raised=row_cap(experiments, folder) or command_value(folder, ROW_CAP), budgets=budgets,
                  table=table(header, capacity_rows(cap, "latency")))


def paper_saving_ranges() -> dict[str, tuple[float, float]]:
    """The paper's Alpaca memory savings (Figures 14-15) as a range per kind: "n" (parallel sampling) and "beam"."""
    saving = paper().saving_alpaca
    return {kind: (min(v for k, v in saving.items() if k.startswith(kind)),
                   max(v for k, v in saving.items() if k.startswith(kind))) for kind in ("n", "beam")}


def section_sampling(experiments: Path, figures: Path | None = None) -> Section:
    parts = [render("sharing_sampling_head.md.j2", criteria=criteria(), setup=trace_setup(load(experiments, "sampling")))]
    section = Section()
    header = ["setting", *BASELINES, "paged", *RATIOS, "saving %",
              "paged's binding limit", "paper saving %", f"before ({sharing_before().commit}): paged/oracle, saving %"]
    for name, label in (("sampling", "Parallel sampling"), ("beam", "Beam search")):
        cap = capacity_part(experiments, name, step(name).title, section)
        if cap is None:
            continue
        rows = [r + [before_cell(name, r[0])] for r in capacity_rows(cap, "latency", paper().saving_alpaca)]
        parts.append(render("sharing_capacity.md.j2", label=label, folder=shown(experiments / name),
                            command=typed_command(name),
                            table=table(header, rows),
                            figure=figure(figures, name, plot_sampling if name == "sampling" else plot_beam, cap)))
        parts.append(render("sharing_goodput.md.j2", criteria=criteria(),
                            ratios=[(r[0], r[ORACLE_RATIO]) for r in capacity_rows(cap, "goodput")]))
        parts.append(raised_cap(experiments, name, header[:-2], section))
        if name == "beam":
            parts.append(latency_distributions(experiments, figures))
    parts.append(trace_length_check(experiments))
    long = load_capacity(experiments, "sampling_1h")
    if long is None and section.has_runs:
        section.not_run.append(step_not_run("sampling_1h", experiments.parent))
    elif long is not None:
        section.warnings += capacity_warnings(long, experiments / "sampling_1h")
    parts.append(render("sharing_paper.md.j2", paper=reference(), alpaca=paper_saving_ranges()))
    saving = capacity_part(experiments, "saving", step("saving").title, section)
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
        parts.append(render("sharing_saving.md.j2", command=typed_command("saving"),
                            table=table(["setting", "paged capacity (req/s)", "saving %", "mean batch (requests)",
                                         "paper saving % (range over n or width)",
                                         f"saving % before ({sharing_before().commit})"], rows),
                            figure=figure(figures, "saving", plot_sharegpt_saving, saving)))
    check = section_persistence(experiments.parent / "beam_persistence" / "persistence.csv")
    parts.append(check.text)
    section.has_runs |= check.has_runs
    section.not_run += check.not_run
    if section.has_runs:
        section.text = "\n".join(p for p in parts if p)
    return section


def persistence_gap(savings: pd.DataFrame, target: dict) -> tuple[float, float] | None:
    """How far, in points, the savings without persistence (0) run above the paper's: (least, most) over the
    widths the paper gives; None when the grid has no persistence 0."""
    if 0 not in savings.index:
        return None
    gaps = [savings.loc[0, w] - v for w, v in target.items() if v is not None]
    return (min(gaps), max(gaps)) if gaps else None


def section_persistence(path: Path) -> Section:
    """The calibration of beam persistence to the paper's Figure 15 savings (pagedbench.studies.beam_persistence), read from
    `path` (ROOT/beam_persistence/persistence.csv under the records' root ROOT)."""
    if not path.is_file():
        return Section(not_run=[step_not_run("beam_persistence", path.parent.parent)])
    t = pd.read_csv(path)
    savings = t.groupby(["persistence", "width"])["saving"].mean().unstack("width")
    target = {w: paper().saving_alpaca.get(f"beam{w}") for w in savings.columns}
    error = sum((savings[w] - v) ** 2 for w, v in target.items() if v is not None)
    best, preset = error.idxmin(), SimBackendConfig().beam_persistence
    rows = [[f"{p:g}" + (" (best fit)" if p == best else "") + (" (preset)" if p == preset else "")]
            + [num(savings.loc[p, w], ".1f") for w in savings.columns] for p in savings.index]
    rows.append(["paper"] + [num(target[w], ".1f") for w in savings.columns])
    return Section(render("beams_persistence.md.j2", command=typed_command("beam_persistence"),
                          rates=sorted(t["rate"].unique()), gap=persistence_gap(savings, target),
                          table=table(["persistence", *[f"saving % at width {w}" for w in savings.columns]], rows)),
                   has_runs=True)


def trace_length_check(experiments: Path) -> str:
    """Parallel sampling's paged / oracle ratio on one-hour traces (the step sampling_1h, one seed) against the
    10-minute ones of the same seed."""
    long, short = load_capacity(experiments, "sampling_1h"), load_capacity(experiments, "sampling")
    if long is None or short is None:
        return ""
    seed = long["seed"].min()

    def ratio(table: pd.DataFrame, workload: str) -> str:
        t = table[(table["workload"] == workload) & (table["seed"] == seed)
                  & table["criterion"].str.startswith("latency")]
        caps, bounds = t.set_index("engine")["capacity"], t.set_index("engine")["bound"]
        value = caps.get("paged", float("nan")) / caps.get(ORACLE, float("nan"))
        return (num(value, ".2f") + "x"
                + bound_note(ratio_bound(bounds.get("paged", "="), bounds.get(ORACLE, "="))))

    rows = [[setting(w), ratio(short, w), ratio(long, w)]
            for w in long["workload"].drop_duplicates()]
    return render("sharing_trace_length.md.j2", seed=seed, criteria=criteria(), command=step("sampling_1h").shown(),
                  rows=rows, short=trace_setup(load(experiments, "sampling")),
                  long=trace_setup(load(experiments, "sampling_1h")))


def section_prefix(experiments: Path, figures: Path | None = None) -> Section:
    cap = load_capacity(experiments, "prefix")
    if cap is None:
        return Section(not_run=[step_not_run("prefix", experiments.parent)])
    header = ["prefix", *BASELINES, "paged", *RATIOS, "saving %",
              "paged's binding limit", "paper paged/oracle", f"before ({sharing_before().commit}): paged/oracle"]
    paper_ratio = {f"{k}shot": f"{v}x" for k, v in paper().prefix_ratio.items()}
    rows = capacity_rows(cap, "latency")
    for r in rows:
        r += [paper_ratio.get(r[0], "-"), before_cell("prefix", r[0], saving=False)]
    return Section(render("sharing_prefix.md.j2", command=typed_command("prefix"), criteria=criteria(),
                          setup=trace_setup(load(experiments, "prefix")),
                          table=table(header, rows), figure=figure(figures, "prefix", plot_prefix, cap)),
                   has_runs=True, warnings=capacity_warnings(cap, experiments / "prefix"))


def section_chat(experiments: Path, figures: Path | None = None) -> Section:
    cap = load_capacity(experiments, "chat")
    if cap is None:
        return Section(not_run=[step_not_run("chat", experiments.parent)])
    header = ["criterion", *BASELINES, "paged", *RATIOS,
              f"before ({sharing_before().commit}): paged/oracle"]
    rows = []
    for crit in ("latency", "goodput"):
        for r in capacity_rows(cap, crit):
            rows.append([crit] + r[1:SAVING] + [before_cell("chat", "n1", saving=False) if crit == "latency" else "-"])
    return Section(render("sharing_chat.md.j2", command=typed_command("chat"), paper=reference(),
                          setup=trace_setup(load(experiments, "chat")),
                          table=table(header, rows), figure=figure(figures, "chat", plot_chat, cap)),
                   has_runs=True, warnings=capacity_warnings(cap, experiments / "chat"))


def real_part(name: str) -> str:
    """What the section calls the part that the real CPU step NAME makes: its step's title less REAL_PART."""
    return step(name).title.removeprefix(REAL_PART)


def section_real_sharing(experiments: Path) -> Section:
    parts, section = [render("sharing_real_head.md.j2")], Section()
    for name in REAL:
        agg = load_aggregate(experiments, name)
        if agg is None:
            section.not_run.append(step_not_run(name, experiments.parent))
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
        parts.append(render("sharing_real_part.md.j2", part=real_part(name), command=typed_command(name),
                            table=table(["setting", "engine", "output tok/s", "mean batch (requests)", "saving %",
                                         "preemptions", "rejected", "paged / this"], rows)))
    agg = load_aggregate(experiments, "swap_real")
    if agg is None:
        section.not_run.append(step_not_run("swap_real", experiments.parent))
    else:
        section.has_runs = True
        rows = preemption_rows(agg, "output_tokens_per_s", ".1f")
        parts.append(render("sharing_real_part.md.j2", part=real_part("swap_real"),
                            command=typed_command("swap_real"),
                            table=table(["block size", "req/s", "swap: output tok/s", "swap: preemptions",
                                         "recompute: output tok/s", "recompute: preemptions"], rows)))
    if section.has_runs:
        section.text = "\n".join(parts)
    return section
