"""Validate the sim against the real backend: one trace through both, per engine, and the sim's error.

    python -m workloads.write_trace data/traces/sharegpt_100_seed1.jsonl sharegpt num_requests=100 seed=1
    python -m studies.replay data/traces/sharegpt_100_seed1.jsonl --hardware cpu-tiny

For each engine, the trace runs first on the real backend (`backend=real`),
then on the sim (`backend=sim hardware=HARDWARE`) with the real run's KV
budget in slots, so both serve the same memory. An offline trace (every
request at t = 0) is scheduled the same way whatever the clock, so the two
runs execute the same iterations in the same order; the replay checks that,
then compares each iteration's time (MAPE) and the run's makespan,
throughput, mean batch size, TTFT and TPOT, as sim vs real and % error.
Runs go to OUT/ENGINE/{real,sim}. A finished real run is reused (`--rerun`
runs it again); the sim always runs again, so a refitted preset is
validated against the same real runs.

Everything that can be checked is checked before the first run (a real run
takes minutes): the presets, the trace file, the engine names, that every
override is KEY=VALUE, then every run's composed config and the trace it
replays. Each problem is one line on stderr starting "error:", exit 2.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
import subprocess
import sys

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
import numpy as np
import pandas as pd

from engines.specs.presets import load_hardware, load_model
from paths import CONF, OUTPUTS, ROOT
from results.record.store import atomic_write
from results.report.replay_table import METRICS, format_table
from workloads import build_workload
from workloads.trace_file import read_trace

SHAPE = ("prefill_seqs", "prefill_tokens", "decode_seqs", "decode_rows")


def run(overrides: list[str], run_dir: Path, rerun: bool) -> dict:
    """One `python run.py` with `overrides` into `run_dir`; its summary."""
    args = [sys.executable, str(ROOT / "run.py"), *overrides, f"hydra.run.dir={run_dir}", "progress=false",
            f"rerun={str(rerun).lower()}"]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0 or not (run_dir / "summary.json").is_file():
        raise RuntimeError(f"`{' '.join(args[1:])}` failed:\n{(done.stderr or done.stdout)[-2000:]}")
    return json.loads((run_dir / "summary.json").read_text())


def compare(real_dir: Path, sim_dir: Path, real: dict, sim: dict) -> dict:
    """Per-iteration MAPE (the two runs must have executed the same iterations) and the run-level errors."""
    a, b = pd.read_parquet(real_dir / "iterations.parquet"), pd.read_parquet(sim_dir / "iterations.parquet")
    same = len(a) == len(b) and all((a[c].to_numpy() == b[c].to_numpy()).all() for c in SHAPE)
    row = {"iterations": len(a), "same_schedule": same}
    if same:
        err = (b["duration_s"].to_numpy() - a["duration_s"].to_numpy()) / a["duration_s"].to_numpy()
        row["iteration_mape_pct"] = 100 * float(np.mean(np.abs(err)))
        decode = (a["decode_seqs"] > 0).to_numpy()
        row["decode_iteration_mape_pct"] = 100 * float(np.mean(np.abs(err[decode]))) if decode.any() else np.nan
        row["prefill_iteration_mape_pct"] = 100 * float(np.mean(np.abs(err[~decode]))) if (~decode).any() else np.nan
    else:
        row["iteration_mape_pct"] = np.nan
    for key, _ in METRICS:
        row[f"real_{key}"], row[f"sim_{key}"] = real[key], sim[key]
        row[f"{key}_error_pct"] = 100 * (sim[key] - real[key]) / real[key] if real[key] else np.nan
    return row


def run_overrides(trace: Path, hardware: str, model: str, engine: str, extra: list[str],
                  real_extra: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """The overrides of one engine's real and sim runs (the sim's KV budget, the real run's, comes later)."""
    common = [f"model={model}", "workload=trace", f"workload.path={trace.resolve()}", *extra]
    return {"real": ["backend=real", f"engine={engine}", *common, *real_extra],
            "sim": ["backend=sim", f"hardware={hardware}", f"engine={engine}", *common]}


def problems(trace: Path, hardware: str, model: str, engines: list[str], extra: list[str],
             real_extra: tuple[str, ...] = ()) -> list[str]:
    """Everything wrong with a replay's arguments, one line each, found without running anything: the
    presets, the trace, the engine names, the overrides' form; then, if those are right, each run's
    composed config and the trace it replays."""
    found = []
    for what, load, name in (("hardware", load_hardware, hardware), ("model", load_model, model)):
        try:
            load(name)
        except (ValueError, TypeError) as err:
            found.append(f"--{what} {name}: {one_line(err)}")
    try:
        read_trace(trace)
    except ValueError as err:
        found.append(one_line(err))
    options = sorted(p.stem for p in (CONF / "engine").glob("*.yaml"))
    for engine in engines:
        if not (CONF / "engine" / f"{engine}.yaml").is_file():
            found.append(f"--engines: {engine!r} is not an engine config (conf/engine/NAME.yaml); "
                         f"valid: {','.join(options)}")
    for flag, overrides in (("override", extra), ("--real", real_extra)):
        for override in overrides:
            key, sep, _ = override.partition("=")
            if not sep or not key.strip():
                found.append(f"{flag} {override!r} is not KEY=VALUE, e.g. limits.max_num_seqs=8")
    return found or composed_problems(trace, hardware, model, engines, extra, real_extra)


def composed_problems(trace: Path, hardware: str, model: str, engines: list[str], extra: list[str],
                      real_extra: tuple[str, ...]) -> list[str]:
    """What run.py would refuse in each run's config, composed and checked as it checks one (its
    RunConfig), and in the trace each workload config builds from the file. A problem of some runs
    only names them: "paged (sim): ..."."""
    from run import RunConfig   # the entry point's one parse of a config into typed parts

    runs: dict[str, list[str]] = {}   # problem -> the runs that have it
    workloads = {}
    count = 0
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        for engine in engines:
            for backend, overrides in run_overrides(trace, hardware, model, engine, extra, real_extra).items():
                count += 1
                try:
                    workload = RunConfig.parse(compose(config_name="config", overrides=overrides)).workload
                except (HydraException, ValueError, TypeError) as err:
                    runs.setdefault(one_line(err), []).append(f"{engine} ({backend})")
                    continue
                workloads.setdefault(repr(workload), workload)
    found = [problem if len(names) == count else f"{', '.join(names)}: {problem}" for problem, names in runs.items()]
    for workload in workloads.values():
        try:
            build_workload(workload)
        except ValueError as err:
            found.append(one_line(err))
    return found


def one_line(err: BaseException) -> str:
    """An exception's message as one line, with its cause's (Hydra puts the reason there)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    text = lines[0] if lines else type(err).__name__
    if err.__cause__ is not None and str(err.__cause__).strip():
        text += f" ({str(err.__cause__).strip().splitlines()[0]})"
    return text


def replay(trace: Path, hardware: str, model: str, engines: list[str], out: Path, extra: list[str],
           rerun: bool = False, real_extra: tuple[str, ...] = ()) -> pd.DataFrame:
    rows = []
    for engine in engines:
        real_dir, sim_dir = out / engine / "real", out / engine / "sim"
        overrides = run_overrides(trace, hardware, model, engine, extra, real_extra)
        real = run(overrides["real"], real_dir, rerun)
        sim = run([*overrides["sim"], f"backend.kv_budget_slots={real['kv_budget_slots']}"], sim_dir, rerun=True)
        rows.append({"engine": real["engine"], "kv_budget_slots": real["kv_budget_slots"],
                     "load_avg_1m_start": real.get("load_avg_1m_start"),
                     **compare(real_dir, sim_dir, real, sim)})
        print(f"{real['engine']}: iteration MAPE {rows[-1]['iteration_mape_pct']:.1f}%, throughput "
              f"{rows[-1]['output_tokens_per_s_error_pct']:+.1f}%", file=sys.stderr, flush=True)
    table = pd.DataFrame(rows)
    atomic_write(out / "replay.csv", lambda tmp: table.to_csv(tmp, index=False))
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.replay", description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="an offline trace file (python -m workloads.write_trace)")
    parser.add_argument("--hardware", required=True, help="the sim's hardware preset, e.g. a fitted one")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--engines", default="static,orca_max,paged")
    parser.add_argument("--out", type=Path, default=OUTPUTS / "replay")
    parser.add_argument("--real", action="append", default=[], metavar="KEY=VALUE",
                        help="an override for the real runs only, e.g. backend.kv_budget_mib=2400 (repeatable)")
    parser.add_argument("--rerun", action="store_true", help="run the real backend again even where its run "
                        "folder is finished")
    parser.add_argument("overrides", nargs="*", help="more key=value overrides for both backends (keys both "
                        "have, e.g. limits.max_num_seqs=8)")
    args = parser.parse_intermixed_args(argv)
    engines = args.engines.split(",")
    found = problems(args.trace, args.hardware, args.model, engines, args.overrides, tuple(args.real))
    for problem in found:
        print(f"error: {problem}", file=sys.stderr)
    if found:
        return 2
    try:
        table = replay(args.trace, args.hardware, args.model, engines, args.out, args.overrides,
                       args.rerun, tuple(args.real))
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(format_table(table))
    print(f"\n{args.out / 'replay.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
