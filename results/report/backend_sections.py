"""The report's sections on the real backend: its runs on this machine's CPU (the build step real_cpu's records)
and the sim against it (`python -m pagedbench.studies.replay`: sim-vs-real error beside the real-vs-real noise floor).

Their prose is docs/report/templates/backend_*.md.j2; this module computes the tables and values they show.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import yaml

from pagedbench.engines import registry
from pagedbench.results.report.bounds import ratio_cell
from pagedbench.results.report.section import Section, shown, step_missing, typed_command
from pagedbench.results.report.replay_table import format_table, misses, targets
from pagedbench.results.report.markdown import num, table
from pagedbench.results.report.template import render
from pagedbench.results.report.read import read_parquet


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
    residuals = source.get("residuals") or {}
    values = {"passes": passes, "grid": profile.get("grid", ""), "fit_rows": residuals.get("rows", "?"),
              "fit_mape": residuals.get("mape"), "preset": spec.get("name"),
              "drift_pct": 100 * source.get("profile_drift", math.nan) if passes else None,
              "scheduler_ms": 1e3 * fitted["scheduler_s"] if fitted.get("scheduler_s") is not None else None,
              "minutes": sum(s.get("seconds", 0) for s in steps) / 60}
    return render("backend_calibration.md.j2", **values)


def section_validation(replay_dir: Path) -> Section:
    """The sim against the real backend on one trace (pagedbench.studies.replay, its calibration protocol), beside the
    real backend's own noise."""
    path = replay_dir / "replay.csv"
    if not path.is_file():
        return Section(not_run=[step_missing("replay", replay_dir)])
    t = pd.read_csv(path)
    noise = list(zip(t["engine"], t.get("real_iteration_mape_pct", pd.Series(dtype=float))))
    verdicts = [(r["engine"], misses(r)) for r in t.to_dict("records")]
    return Section(render("backend_validation.md.j2", command=typed_command("replay"),
                          calibration=calibration_note(replay_dir), table=format_table(t), targets=targets(),
                          noise=noise, verdicts=verdicts), has_runs=True)


HF_RESULT = "hf_generate.json"   # what `python -m pagedbench.studies.hf_generate --out DIR` writes in DIR


def outside_reference(static: Path | None, hf: Path | None) -> tuple[dict | None, list]:
    """Our static engine's run and transformers `generate`'s on the same requests (the build's steps
    static_reference and hf_generate): the template's values, or None, and the parts that have no records."""
    if static is None or hf is None:
        return None, []
    ours = sorted(static.glob("*/summary.json")) if static.is_dir() else []
    theirs = hf / HF_RESULT
    missing = ([] if ours else [step_missing("static_reference", static)]) + \
        ([] if theirs.is_file() else [step_missing("hf_generate", hf)])
    if missing:
        return None, missing
    run, reference = json.loads(ours[0].read_text()), json.loads(theirs.read_text())
    rows = [[render("backend_reference_hf.md.j2", batch=reference["batch_size"]).strip(),
             num(reference["output_tokens_per_s"], ".1f"), f"`{typed_command('hf_generate', hf)}`"],
            [render("backend_reference_static.md.j2").strip(), num(run["output_tokens_per_s"], ".1f"),
             f"`{typed_command('static_reference')}`"]]
    return {"requests": reference["num_requests"], "table": table(["what", "output tok/s", "command"], rows),
            "same_requests": run["num_requests"] == reference["num_requests"]}, []


def real_rounds(folder: Path) -> dict[str, dict[int, dict]]:
    """Each engine's runs in `folder` by round (the runs' `round`, from `+round=...` in the step's sweep; 0 where a
    run has none): engine label -> round -> summary."""
    out: dict[str, dict[int, dict]] = {}
    for path in sorted(folder.glob("*/summary.json")):
        summary = json.loads(path.read_text())
        meta = path.parent / "run.json"
        config = json.loads(meta.read_text()).get("config", {}) if meta.is_file() else {}
        rounds = out.setdefault(summary["engine"], {})
        at = int(config.get("round", 0))
        if at in rounds:
            raise ValueError(f"{folder}: two {summary['engine']} runs in round {at}: give each run a round")
        rounds[at] = summary
    return out


def spread(values: list[float | None], spec: str) -> str:
    """A mean, and its min-max where the values differ as shown: "287.6 (258.9-303.2)"; over the values a run has
    (a figure is null where its run had nothing to measure, as no iteration while requests waited), "n/a" where
    none has one."""
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return "n/a"
    low, high = num(min(values), spec), num(max(values), spec)
    text = num(sum(values) / len(values), spec)
    return text if low == high else f"{text} ({low}-{high})"


def section_real(folder: Path, static_reference: Path | None = None, hf_generate: Path | None = None) -> Section:
    """The real backend's runs on this machine's CPU, each engine once per round, the rounds interleaved:
    throughput, batch and memory as a mean (min-max) over the rounds, paged over the others paired by round, and
    what a decode step costs by its batch; with `static_reference` and `hf_generate`, our static engine beside
    transformers `generate` on the same requests."""
    by_engine = real_rounds(folder) if folder.is_dir() else {}
    if not by_engine:
        return Section(not_run=[step_missing("real_cpu", folder)])
    reference, missing = outside_reference(static_reference, hf_generate)
    ordered = sorted(by_engine.items(), key=lambda kv: registry.rank(kv[0]))

    def column(runs: dict[int, dict], key: str, spec: str, scale: float = 1.0) -> str:
        return spread([None if s.get(key) is None else scale * s[key] for s in runs.values()], spec)
    rows = [[e, column(r, "output_tokens_per_s", ".1f"), column(r, "mean_batch_size", ".2f"),
             column(r, "mem_token_states", ".1f", 100), column(r, "mem_waiting_token_states", ".1f", 100),
             column(r, "wall_s", ".0f")] for e, r in ordered]
    paged = by_engine.get("paged", {})
    ratios = []
    for base in (registry.label("static"), registry.label("orca_max")):
        pairs = [paged[r]["output_tokens_per_s"] / runs[r]["output_tokens_per_s"]
                 for runs in [by_engine.get(base, {})] for r in sorted(set(paged) & set(runs))]
        if pairs:
            ratios.append((base, ratio_cell(pd.Series(pairs)), ", ".join(f"{p:.2f}x" for p in pairs)))
    steps = step_times(folder)
    config = next(iter(ordered[0][1].values()))
    text = render("backend_real.md.j2", command=typed_command("real_cpu"), folder=shown(folder),
                  requests=config.get("num_requests"), kv_slots=config.get("kv_budget_slots"),
                  kv_budget_mib=(config.get("kv_budget_bytes") or math.nan) / 2 ** 20,
                  rounds=max(len(r) for r in by_engine.values()),
                  table=table(["engine", "output tok/s", "mean decode batch", "token states %",
                               "token states % while waiting", "wall s"], rows), ratios=ratios,
                  steps=table(["decode rows", "iterations", "mean step (ms)", "ms per sequence"], steps) if steps
                  else "", reference=reference)
    return Section(text, has_runs=True, not_run=missing)


def step_times(folder: Path) -> list[list[str]]:
    """Decode step time by batch size, over the decode iterations of every real run in `folder`."""
    frames = [read_parquet(p) for p in sorted(folder.glob("*/iterations.parquet"))]
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
