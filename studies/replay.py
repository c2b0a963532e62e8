"""Validate the sim against the real backend: one trace through both, per engine, beside the real backend's own noise.

    python -m pagedbench.workloads.write_trace data/traces/sharegpt_100_seed1.jsonl sharegpt num_requests=100 seed=1
    python -m pagedbench.studies.replay data/traces/sharegpt_100_seed1.jsonl                        # calibrate here
    python -m pagedbench.studies.replay TRACE --model opt-1.3b --hardware h200-opt-1.3b --real backend.kv_budget_mib=2400

The protocol, in one process (the shared machine's speed drifts by 2x within minutes, so a sim fitted
an hour earlier, or compared with one real run, measures the drift as much as the sim):

1. profile the real backend's iteration time over pagedbench.studies.profile's grid (`--profile-grid`, the full one by
   default; `--profile-passes` passes, shapes in a seeded random order), immediately before the real runs;
2. run the trace on the real backend `--repeats` times per engine, interleaved (A B C A B C), the model
   loaded once and shared; each run's tables and summary go to OUT/ENGINE/real_K;
3. profile again, immediately after; fit a preset to the before and after rows in memory (`--base`'s
   numbers plus the fitted terms; nothing is written under conf/) and set its `scheduler_s` to the host's
   time between iterations measured on the real runs (the median over every engine's iterations);
4. run the trace on the sim with that preset and the real runs' KV budget in slots (OUT/ENGINE/sim), and
   compare (studies/replay_compare.py).

With `--hardware NAME` there is no profile (`--profile-passes` defaults to 0): the sim uses that preset's
fitted terms as they are, with the `scheduler_s` measured on these real runs. An offline trace (every
request at t = 0) is scheduled the same way whatever the clock, so every run executes the same
iterations in the same order; the replay checks that, then compares each iteration's time (MAPE against
the repeats' mean) and the run's makespan, throughput, mean batch size, TTFT and TPOT (error against the
repeats' mean), each beside the spread of the real repeats. The replay never reuses an earlier real run:
every real run is made again, beside the profiles that calibrate its sim. OUT also gets replay.csv,
preset.yaml (the preset the sim used), profile.parquet (the profile rows) and protocol.json (each step's
start and length).

Everything that can be checked is checked before the first run (a real run takes minutes): the presets,
the trace file, the engine names, that every override is KEY=VALUE, then every run's composed config and
the trace it replays. Each problem is one line on stderr starting "error:", exit 2.
"""
from __future__ import annotations

import argparse
from dataclasses import asdict, replace
from pathlib import Path
import sys
import time

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
import numpy as np
from omegaconf import OmegaConf
import pandas as pd

from pagedbench.engines.sim.build import build_sim
from pagedbench.engines.specs.presets import load_hardware, load_model
from pagedbench.paths import CONF, OUTPUTS
from pagedbench.results.record.store import atomic_write
from pagedbench.results.report.replay_table import format_table
from pagedbench.studies.calibration import (ProfilePlan, calibrated, profile_drift, profile_phase, scheduler_seconds,
                                 with_scheduler, write_preset)
from pagedbench.studies.replay_compare import compare
from pagedbench.studies.replay_runs import EngineRuns, StepLog, real_runs, serve
from pagedbench.workloads import build_workload
from pagedbench.workloads.trace_file import read_trace


def run_overrides(trace: Path, hardware: str, model: str, engine: str, extra: list[str],
                  real_extra: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """The overrides of one engine's real and sim runs (the sim's KV budget, the real run's, comes later)."""
    common = [f"model={model}", "workload=trace", f"workload.path={trace.resolve()}", *extra]
    return {"real": ["backend=real", f"engine={engine}", *common, *real_extra],
            "sim": ["backend=sim", f"hardware={hardware}", f"engine={engine}", *common]}


def problems(trace: Path, hardware: str | None, model: str, engines: list[str], extra: list[str],
             real_extra: tuple[str, ...] = (), base: str = "cpu", profiling: bool = False) -> list[str]:
    """Everything wrong with a replay's arguments, one line each, found without running anything: the
    presets, the trace, the engine names, the overrides' form; then, if those are right, each run's
    composed config and the trace it replays."""
    found = []
    if hardware is not None and profiling:
        found.append(f"--hardware {hardware} replays that preset as it is, without profiling: drop "
                     f"--profile-passes (or set it to 0), or drop --hardware to fit a preset here")
    presets = (("--hardware", load_hardware, hardware) if hardware is not None else ("--base", load_hardware, base),
               ("--model", load_model, model))
    for flag, load, name in presets:
        try:
            spec = load(name)
        except (ValueError, TypeError) as err:
            found.append(f"{flag} {name}: {one_line(err)}")
            continue
        fitted_for = (getattr(spec, "fitted", None) or {}).get("model")
        if flag == "--hardware" and fitted_for not in (None, model):
            found.append(f"--hardware {name} was fitted for model {fitted_for!r}, not {model!r}: replay "
                         f"--model {fitted_for}, or drop --hardware to fit a preset for {model} here")
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
    return found or composed_problems(trace, hardware or base, model, engines, extra, real_extra)


def composed_problems(trace: Path, hardware: str, model: str, engines: list[str], extra: list[str],
                      real_extra: tuple[str, ...]) -> list[str]:
    """What run.py would refuse in each run's config, composed and checked as it checks one (its
    RunConfig), and in the trace each workload config builds from the file. A problem of some runs
    only names them: "paged (sim): ..."."""
    from pagedbench.run import RunConfig   # the entry point's one parse of a config into typed parts

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


def compose_runs(trace: Path, hardware: str, model: str, engines: list[str], extra: list[str],
                 real_extra: tuple[str, ...]) -> list[EngineRuns]:
    """Each engine's real and sim config (already checked by `problems`)."""
    from pagedbench.run import RunConfig

    out = []
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        for engine in engines:
            cfgs = {backend: compose(config_name="config", overrides=overrides) for backend, overrides
                    in run_overrides(trace, hardware, model, engine, extra, real_extra).items()}
            plain = {backend: OmegaConf.to_container(cfg, resolve=True) for backend, cfg in cfgs.items()}
            out.append(EngineRuns(engine, RunConfig.parse(cfgs["real"]), plain["real"],
                                  RunConfig.parse(cfgs["sim"]), plain["sim"]))
    return out


def replay(trace: Path, model: str, engines: list[str], out: Path, extra: list[str],
           real_extra: tuple[str, ...] = (), hardware: str | None = None, base: str = "cpu", repeats: int = 2,
           plan: ProfilePlan = ProfilePlan()) -> pd.DataFrame:
    """The protocol of the module's doc; the comparison table (also OUT/replay.csv)."""
    if repeats < 2:
        raise ValueError(f"repeats must be >= 2 (the real-vs-real spread needs two runs), got {repeats}")
    runs = compose_runs(trace, hardware or base, model, engines, extra, real_extra)
    requests = build_workload(runs[0].real.workload)
    protocol = StepLog(out / "protocol.json")
    rng = np.random.default_rng(plan.seed)
    backend = runs[0].real.backend
    profiles, env = [], {}
    grid_name = "quick" if plan.quick else "full"

    def profile(phase: str) -> None:
        df, found = profile_phase(model, backend.device, backend.dtype, plan, phase, rng)
        profiles.append(df)
        env.update(found)

    if plan.passes:
        protocol.step("profile", lambda: profile("before"), phase="before", passes=plan.passes, grid=grid_name)
    real = real_runs(runs, requests, repeats, out, protocol)
    if plan.passes:
        protocol.step("profile", lambda: profile("after"), phase="after", passes=plan.passes, grid=grid_name)
    scheduler_s = scheduler_seconds([f for reps in real.values() for _, f in reps])
    if plan.passes:
        table = pd.concat(profiles, ignore_index=True)
        atomic_write(out / "profile.parquet", lambda tmp: table.to_parquet(tmp, index=False))
        hw = calibrated(load_hardware(base), f"{base}-{model}-replay", table, env, scheduler_s)
        how = (f"Fitted by `python -m pagedbench.studies.replay` to {len(table)} profiled iterations before and after its real "
               f"runs (profile.parquet), on the {base} preset's numbers; not a conf/hardware preset.")
        print(f"fit: MAPE {100 * hw.fitted['source']['residuals']['mape']:.1f}% on {len(table)} profiled iterations; "
              f"profile drift after / before {100 * profile_drift(table):+.1f}%", file=sys.stderr)
    else:
        hw = with_scheduler(load_hardware(hardware), scheduler_s)
        how = f"conf/hardware/{hardware}.yaml as the replay used it, with scheduler_s measured on its real runs."
    write_preset(hw, out / "preset.yaml", how)
    print(f"scheduler_s (host time between iterations, median over {len(engines)} engines' real runs): "
          f"{1e3 * scheduler_s:.3f} ms", file=sys.stderr)
    rows = []
    for r in runs:
        reps = real[r.engine]
        slots = reps[0][0]["kv_budget_slots"]
        sim_cfg = {**r.sim_cfg, "backend": {**r.sim_cfg["backend"], "kv_budget_slots": slots},
                   "hardware": asdict(hw)}
        setup = build_sim(replace(r.sim.backend, kv_budget_slots=slots), r.sim.model, hw, r.sim.engine, r.sim.limits,
                          r.sim_cfg["gpu_memory_utilization"])
        sim = protocol.step("sim", lambda: serve(r.sim, sim_cfg, setup, requests, out / r.engine / "sim"),
                            engine=r.engine)
        loads = [s[k] for s, _ in reps for k in ("load_avg_1m_start", "load_avg_1m_end") if s.get(k) is not None]
        row = {"engine": reps[0][0]["engine"], "hardware": hw.name, "kv_budget_slots": slots,
               "scheduler_s": scheduler_s, "load_avg_1m_max": max(loads, default=np.nan), **compare(reps, sim)}
        rows.append(row)
        print(f"{row['engine']}: iteration MAPE {row['iteration_mape_pct']:.1f}% (real vs real "
              f"{row['real_iteration_mape_pct']:.1f}%), throughput {row['output_tokens_per_s_error_pct']:+.1f}% "
              f"(real spread {row['output_tokens_per_s_real_spread_pct']:.1f}%)", file=sys.stderr, flush=True)
    table = pd.DataFrame(rows)
    atomic_write(out / "replay.csv", lambda tmp: table.to_csv(tmp, index=False))
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.studies.replay", description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="an offline trace file (python -m pagedbench.workloads.write_trace)")
    parser.add_argument("--hardware", help="replay with this preset (e.g. one fitted on a GPU) instead of "
                        "profiling and fitting one here")
    parser.add_argument("--base", default="cpu", help="when profiling: the preset whose memory and link numbers "
                        "the fitted one keeps (default: cpu)")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--engines", default="static,orca_max,paged")
    parser.add_argument("--out", type=Path, default=OUTPUTS / "replay")
    parser.add_argument("--repeats", type=int, default=2, help="real runs per engine, interleaved (>= 2)")
    parser.add_argument("--profile-passes", type=int, help="passes over the profile grid before and after the "
                        "real runs (default 2; 0 with --hardware)")
    parser.add_argument("--profile-warmup", type=int, default=1, help="untimed runs of each shape per pass")
    parser.add_argument("--profile-repeats", type=int, default=3, help="timed runs of each shape per pass "
                        "(the row keeps their median)")
    parser.add_argument("--profile-grid", choices=("quick", "full"), default="full",
                        help="pagedbench.studies.profile's full grid (default: it has the decode batches of 2 and 4 where "
                        "this CPU's step time jumps) or its quick one")
    parser.add_argument("--seed", type=int, default=0, help="the profile's shape order")
    parser.add_argument("--real", action="append", default=[], metavar="KEY=VALUE",
                        help="an override for the real runs only, e.g. backend.kv_budget_mib=2400 (repeatable)")
    parser.add_argument("overrides", nargs="*", help="more key=value overrides for both backends (keys both "
                        "have, e.g. limits.max_num_seqs=8)")
    args = parser.parse_intermixed_args(argv)
    engines = args.engines.split(",")
    passes = args.profile_passes if args.profile_passes is not None else (0 if args.hardware else 2)
    found = []
    try:
        plan = ProfilePlan(passes, args.profile_warmup, args.profile_repeats, args.profile_grid == "quick", args.seed)
    except ValueError as err:
        found.append(str(err).replace("profile ", "--profile-", 1))
    if args.repeats < 2:
        found.append(f"--repeats {args.repeats}: the real-vs-real spread needs at least 2 runs per engine")
    found += problems(args.trace, args.hardware, args.model, engines, args.overrides, tuple(args.real), args.base,
                      profiling=bool(args.profile_passes))
    for problem in found:
        print(f"error: {problem}", file=sys.stderr)
    if found:
        return 2
    started = time.perf_counter()
    try:
        table = replay(args.trace, args.model, engines, args.out, args.overrides, tuple(args.real), args.hardware,
                       args.base, args.repeats, plan)
    except (RuntimeError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(format_table(table))
    print(f"\n{args.out / 'replay.csv'} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
