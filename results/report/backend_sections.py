"""The report's sections on the real backend: its runs on this machine's CPU (kept in data/runs/real_cpu)
and the sim against it (`python -m studies.replay`: sim-vs-real error beside the real-vs-real noise floor)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import yaml

from results.report.section import NotRun, Section, shown
from results.report.replay_table import ITERATION_MAPE_TARGET_PCT, RUN_ERROR_TARGET_PCT, format_table, misses
from results.report.markdown import num, pct, table
from results.report.paper_sections import ENGINES


def calibration_note(replay_dir: Path) -> str:
    """The replay's calibration in a sentence, from its preset.yaml and protocol.json ("" without them)."""
    preset, protocol = replay_dir / "preset.yaml", replay_dir / "protocol.json"
    if not preset.is_file():
        return ""
    spec = yaml.safe_load(preset.read_text()) or {}
    fitted = spec.get("fitted") or {}
    source = fitted.get("source") or {}
    steps = json.loads(protocol.read_text()).get("steps", []) if protocol.is_file() else []
    profile = next((s for s in steps if s.get("step") == "profile"), {})
    passes = profile.get("passes")
    seconds = sum(s.get("seconds", 0) for s in steps)
    residuals = source.get("residuals") or {}
    parts = []
    if passes:
        parts.append(f"the profile ran {passes} pass(es) of the {profile.get('grid', '')} grid before and {passes} "
                     f"after the real runs; the fit's MAPE on its {residuals.get('rows', '?')} rows is "
                     f"{pct(residuals.get('mape'))}%, and the "
                     f"profile after them read {num(100 * source.get('profile_drift', math.nan), '+.1f')}% against "
                     "the one before (median over shapes)")
    else:
        parts.append(f"no profile: the sim used the preset {spec.get('name')} as fitted earlier")
    if fitted.get("scheduler_s") is not None:
        parts.append(f"scheduler_s (host time between iterations, median over every real run) "
                     f"{1e3 * fitted['scheduler_s']:.3f} ms")
    if seconds:
        parts.append(f"the whole protocol took {seconds / 60:.1f} min")
    return "In this replay " + "; ".join(parts) + ".\n\n"


def section_validation(replay_dir: Path) -> Section:
    """The sim against the real backend on one trace (studies.replay, its calibration protocol), beside the
    real backend's own noise."""
    title = "The sim against the real backend (calibration and validation)"
    command = "python -m studies.replay data/traces/sharegpt_100_seed1.jsonl"
    head = (f"## {title}\n\n`{command}` (100 ShareGPT requests at t = 0, seed 1), in one process: profile the "
            "real backend's iteration time over `studies.profile`'s full grid (shapes in a seeded random order, "
            "a new order each pass) immediately before the real runs; run each engine on the real backend at "
            "least twice, interleaved (static, Orca, paged, static, Orca, paged), on one loaded model; profile "
            "again immediately after; fit the cost model's linear terms to the before and after rows "
            "(non-negative least squares, in memory; the preset is kept as `preset.yaml` beside the runs), with "
            "`scheduler_s`, the host's time between two iterations, measured on the real runs (one median for "
            "every engine); then run the sim once per engine with that preset and the real runs' KV slots. Each "
            "real run is made afresh, never reused: this 2-core machine's speed drifts (the same real run gave "
            "340 to 759 output tok/s minutes apart), so a preset fitted an hour earlier, or one real run, "
            "measures the drift as much as the sim. The runs execute the same iterations, so each iteration's "
            "time is compared with the real repeats' mean; each run-level figure is the sim's against the "
            "repeats' mean, beside the repeats' spread (max - min over mean): the noise floor, how far one real "
            "run is from another.\n\n")
    path = replay_dir / "replay.csv"
    if not path.is_file():
        return Section(not_run=[NotRun(title, f"{command} --out {shown(replay_dir)}", replay_dir)])
    t = pd.read_csv(path)
    verdicts = []
    for r in t.to_dict("records"):
        missed = misses(r)
        verdicts.append(f"- {r['engine']}: " + ("meets both targets" if not missed else "misses " + "; ".join(missed)))
    floor = [f"{e} {v:.1f}%" for e, v in zip(t["engine"], t.get("real_iteration_mape_pct", pd.Series(dtype=float)))]
    noise = f" Real against real, per iteration: {', '.join(floor)}." if floor else ""
    return Section(head + calibration_note(replay_dir) + format_table(t)
                   + f"\n\nTargets: per-iteration MAPE <= {ITERATION_MAPE_TARGET_PCT:g}%, and each run-level "
                   f"figure within the real-vs-real spread (or within {RUN_ERROR_TARGET_PCT:g}% where the spread "
                   f"is narrower).{noise}\n\n" + "\n".join(verdicts) + "\n\nWhat limits the match on this "
                   "machine: the fit is linear in rows, tokens and context (a 2-core CPU's step time is not: "
                   "torch's threads engage at some sizes and not others), and what is left of the drift within "
                   "the protocol's minutes (each summary records the load average beside it).\n", has_runs=True)


def section_real(folder: Path) -> Section:
    head = ("## The real backend on this machine's CPU\n\n`python run.py -m engine=static,orca,paged` (tiny OPT "
            "model, random weights, fp32, 100 ShareGPT requests at t = 0, 64 MiB KV budget = 8,192 slots; "
            "results kept in `data/runs/real_cpu/`)\n\n")
    runs = sorted(folder.glob("*/summary.json")) if folder.is_dir() else []
    if not runs:
        return Section(not_run=[NotRun("The real backend on this machine's CPU",
                                       "python run.py -m engine=static,orca,paged", folder)])
    summaries = {json.loads(p.read_text())["engine"]: json.loads(p.read_text()) for p in runs}
    rows = [[e, num(s["output_tokens_per_s"], ".1f"), num(s["mean_batch_size"], ".2f"), pct(s["mem_token_states"]),
             pct(s["mem_waiting_token_states"]), num(s["wall_s"], ".0f")]
            for e, s in sorted(summaries.items(), key=lambda kv: ENGINES.index(kv[0]))]
    text = head + table(["engine", "output tok/s", "mean decode batch", "token states %",
                         "token states % while waiting", "wall s"], rows) + "\n"
    paged = summaries.get("paged")
    for base in ("static", "orca-max"):
        if paged and base in summaries:
            text += (f"\npaged / {base} output tokens/s: "
                     f"{paged['output_tokens_per_s'] / summaries[base]['output_tokens_per_s']:.2f}x")
    steps = step_times(folder)
    if steps:
        text += ("\n\nWhat limits the ratio on a CPU: a decode step's wall time grows almost linearly with the "
                 "number of sequences in it (all engines' decode iterations, from `iterations.parquet`):\n\n"
                 + table(["decode rows", "iterations", "mean step (ms)", "ms per sequence"], steps)
                 + "\n\nOn a GPU a decode step is bound by reading the weights and stays nearly flat as the "
                   "batch grows, which is what turns a larger batch into proportionally more throughput there.")
    extra = folder / "notes.md"
    if extra.is_file():
        text += "\n\n" + extra.read_text()
    return Section(text + "\n", has_runs=True)


def step_times(folder: Path) -> list[list[str]]:
    """Decode step time by batch size, over the decode iterations of every real run in `folder`."""
    frames = [pd.read_parquet(p) for p in sorted(folder.glob("*/iterations.parquet"))]
    if not frames:
        return []
    df = pd.concat(frames, ignore_index=True)
    decode = df[df["decode_seqs"] > 0]
    bins = pd.cut(decode["decode_rows"], [0, 1, 2, 4, 8, 16, 24, 32, 64, 256])
    rows = []
    for interval, g in decode.groupby(bins, observed=True):
        mean_rows = g["decode_rows"].mean()
        rows.append([f"{int(interval.left) + 1}-{int(interval.right)}", str(len(g)),
                     f"{1000 * g['duration_s'].mean():.1f}", f"{1000 * g['duration_s'].mean() / mean_rows:.2f}"])
    return rows
