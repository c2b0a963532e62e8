"""The paper's central experiment on one GPU, in one command: five engines, one model, one queue, the paper's budget.

    python -m pagedbench.studies.claim --out data/runs/gpu_claim_h100      # OPT-13B, fp16, on this machine's GPU
    bash scripts/gpu_claim.sh OUTDIR                                        # the same on a bare device (no network)
    DRY_RUN=1 bash scripts/gpu_claim.sh OUTDIR                              # every step, small, on a CPU

The protocol (PagedAttention section 6.2, Figure 12's setting, on the GPU at hand):

1. The queue: `--requests` ShareGPT requests (workload=sharegpt, seeded), every one waiting at t = 0 (offline),
   served for `--serve-s` seconds of wall time per engine: the last request "arrives" at `--serve-s` and the
   run stops there (stop_at_last_arrival), so each engine works through the same queue for the same time and
   none drains it. Its figures are the summary's steady window (the first `measure.warmup_fraction` of the
   span left out).
2. The KV budget, in token slots: the one the paper's A100-40GB leaves the model (engines/kv/budget.py on the
   a100-40gb preset: 15,449 slots for OPT-13B, 12,070 MiB in fp16, so that Orca (Max) batches exactly 7
   requests of 2,048 tokens), unless `--kv-slots`. The same slots for every engine.
3. Each engine in turn on one loaded model: its run folder as run.py writes one (OUT/ENGINE/real), every
   iteration's cost-model features and host time (OUT/ENGINE/steps.parquet), the device's busy share over a
   profiled sample of steady steps and `torch.cuda.max_memory_allocated` (a GPU only), its row of claim.csv,
   then OUT/claim.tar.gz packed again, so a run cut short still brings back every engine it finished.
   Greedy decode steps run as CUDA graphs, one per row bucket (engines/real/graphs.py), where every engine's
   capture works (`--cuda-graphs auto`); otherwise eagerly, with the reason in claim.csv.
4. The sim's linear cost model fitted to every engine's iterations together (pagedbench.studies.fit's terms;
   OUT/preset.yaml), and each engine replayed through the sim on the same queue, slots and serving time
   (OUT/ENGINE/sim): the sim's figures beside the real ones, with the error.

Everything that can be checked is checked before the model loads: engine names, the composed configs and
the budget (Orca (Max) must fit one request). Problems are lines on stderr starting "error:", exit 2.
"""
from __future__ import annotations

import argparse
from dataclasses import asdict, replace
from pathlib import Path
import sys
import tarfile
import time

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
import numpy as np
from omegaconf import OmegaConf
import pandas as pd
import torch

from pagedbench.engines.kv.budget import kv_budget
from pagedbench.engines.real.build import build_real, load_real_model
from pagedbench.engines.sim.build import build_sim
from pagedbench.engines.specs.presets import load_hardware, load_model
from pagedbench.paths import CONF, OUTPUTS
from pagedbench.results.record.store import atomic_write
from pagedbench.studies.calibration import calibrated, release_memory, scheduler_seconds, write_preset
from pagedbench.studies.claim_steps import StepRecorder
from pagedbench.studies.replay_runs import EngineRuns, StepLog, serve
from pagedbench.workloads import Request, build_workload

ENGINES = ("static", "orca_max", "orca_pow2", "orca_oracle", "paged")
PAPER_GPU = "a100-40gb"
PAPER_PAGED_BATCH = 30.42   # PagedAttention Figure 13a: vLLM's mean batch on ShareGPT (OPT-13B, 2 req/s)
FIT_BASES = {"H200": "h200", "H100": "h100-80gb", "A100": "a100-80gb"}


def paper_slots(model: str) -> int:
    """The KV slots the paper's A100-40GB leaves `model` at vLLM's default utilization."""
    return kv_budget(load_model(model), load_hardware(PAPER_GPU)).num_slots


def fit_base(device_name: str) -> str:
    """The preset whose memory and link numbers the fitted one keeps: the GPU's own, else the cpu preset."""
    return next((preset for key, preset in FIT_BASES.items() if key in device_name), "cpu")


def compose_runs(model: str, engines: list[str], requests: int, seed: int, dtype: str,
                 extra: list[str], trace: Path | None = None) -> list[EngineRuns]:
    """Each engine's real and sim config, composed and parsed as run.py does: the queue drawn from ShareGPT,
    or read from `trace` (a file of pagedbench.workloads.write_trace, for a machine without the dataset)."""
    from pagedbench.run import RunConfig

    queue = ([f"workload=trace", f"workload.path={trace.resolve()}"] if trace is not None else
             ["workload=sharegpt", f"workload.num_requests={requests}", f"workload.seed={seed}"])
    common = [f"model={model}", *queue, *extra]
    out = []
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        for engine in engines:
            cfgs = {"real": compose(config_name="config", overrides=["backend=real", f"backend.dtype={dtype}",
                                                                     f"engine={engine}", *common]),
                    "sim": compose(config_name="config", overrides=["backend=sim", f"engine={engine}", *common])}
            # Stopped at the last arrival (run.py refuses that flag for an offline trace, whose last arrival is
            # t = 0; the claim's queue moves it to --serve-s): set on the records' configs, which serve reads.
            plain = {k: {**OmegaConf.to_container(cfg, resolve=True), "stop_at_last_arrival": True}
                     for k, cfg in cfgs.items()}
            out.append(EngineRuns(engine, RunConfig.parse(cfgs["real"]), plain["real"],
                                  RunConfig.parse(cfgs["sim"]), plain["sim"]))
    return out


def claim_queue(requests: list[Request], serve_s: float) -> list[Request]:
    """Every request waiting at t = 0 but the last, which arrives at `serve_s` and ends the run there."""
    queue = [replace(r, arrival_s=0.0) for r in requests]
    queue[-1] = replace(queue[-1], arrival_s=float(serve_s))
    return queue


def window_decode_batch(summary: dict, iterations: pd.DataFrame) -> float:
    """Mean rows of the decode iterations that start in the summary's steady window."""
    start = iterations["start_s"]
    inside = (start >= summary["window_start_s"]) & (start <= summary["window_end_s"])
    decode = iterations.loc[inside & (iterations["decode_rows"] > 0), "decode_rows"]
    return float(decode.mean()) if len(decode) else float("nan")


def figures(summary: dict, iterations: pd.DataFrame) -> dict:
    """One run's figures of claim.csv: the steady window's throughput, decode batch and KV split (shares of the
    budget)."""
    split = {f"kv_{k}": summary[f"steady_mem_{k}"] for k in
             ("token_states", "reservation", "internal_fragmentation", "external_fragmentation", "free")}
    return {"output_tokens_per_s": summary["steady_output_tokens_per_s"],
            "mean_decode_batch": window_decode_batch(summary, iterations),
            "preemptions": summary["num_preemptions"], "finished": summary["num_finished"], **split}


def pack(out: Path) -> None:
    """OUT/claim.tar.gz: everything measured so far, in one file (written aside, then renamed)."""
    tmp = out / "claim.tar.gz.tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        for path in sorted(out.rglob("*")):
            if path.is_file() and not path.name.startswith("claim.tar.gz"):
                tar.add(path, arcname=str(path.relative_to(out)))
    tmp.replace(out / "claim.tar.gz")


def write_table(rows: list[dict], out: Path) -> pd.DataFrame:
    table = pd.DataFrame(rows)
    atomic_write(out / "claim.csv", lambda tmp: table.to_csv(tmp, index=False))
    return table


def graphs_work(runs: list[EngineRuns], loaded, budget_mib: float) -> str | None:
    """None if every engine's decode graphs capture on this device; else why not (the first error's line)."""
    for r in runs:
        backend = replace(r.real.backend, kv_budget_mib=budget_mib, cuda_graphs=True)
        try:
            build_real(backend, r.real.model, r.real.engine, r.real.limits, loaded=loaded).executor.warmup()
        except Exception as err:   # noqa: BLE001 - any failure to capture falls back to eager steps, recorded
            return f"{r.engine}: {type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
        finally:
            release_memory()
    return None


def claim(model: str, engines: list[str], out: Path, requests: int, serve_s: float, slots: int | None,
          seed: int = 0, dtype: str = "auto", profile_steps: int = 20, extra: list[str] | None = None,
          trace: Path | None = None, cuda_graphs: str = "auto") -> pd.DataFrame:
    """The protocol of the module's doc; the table (also OUT/claim.csv). `cuda_graphs`: on, off, or auto (on
    where every engine's decode graphs capture; else off, with the reason in claim.csv)."""
    runs = compose_runs(model, engines, requests, seed, dtype, list(extra or ()), trace)
    queue = claim_queue(build_workload(runs[0].real.workload), serve_s)
    requests = len(queue)
    protocol = StepLog(out / "protocol.json")
    loaded = protocol.step("load", lambda: load_real_model(runs[0].real.backend, runs[0].real.model), model=model)
    slots = slots if slots is not None else paper_slots(model)
    budget_mib = slots * loaded.bytes_per_slot / 2**20   # exact: the executor's budget // bytes per slot = slots
    device, cuda = loaded.device, loaded.device.type == "cuda"
    device_name = torch.cuda.get_device_name(device) if cuda else "cpu"
    graphs, graphs_note = cuda_graphs == "on", ""
    if cuda_graphs == "auto":
        failed = protocol.step("graphs", lambda: graphs_work(runs, loaded, budget_mib)) if cuda else "no GPU"
        graphs, graphs_note = failed is None, failed or ""
        print(f"decode graphs: {'on' if graphs else f'off ({failed})'}", file=sys.stderr, flush=True)
    rows, frames, steps = [], {}, []
    for r in runs:
        backend = replace(r.real.backend, kv_budget_mib=budget_mib, cuda_graphs=graphs)
        cfg = {**r.real_cfg, "backend": {**r.real_cfg["backend"], "kv_budget_mib": budget_mib, "cuda_graphs": graphs}}
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        setup = build_real(backend, r.real.model, r.real.engine, r.real.limits, loaded=loaded)
        recorder = StepRecorder(setup.executor, r.real.engine.block_size, device,
                                profile_from_s=r.real.measure.warmup_fraction * serve_s, profile_steps=profile_steps)
        setup = replace(setup, executor=recorder)
        summary, iterations = protocol.step("real", lambda: serve(r.real, cfg, setup, queue, out / r.engine / "real"),
                                            engine=r.engine)
        recorder.finish()
        table = recorder.table(r.engine)
        atomic_write(out / r.engine / "steps.parquet", lambda tmp: table.to_parquet(tmp, index=False))
        steps.append(table)
        frames[r.engine] = (summary, iterations)
        decode_host = table.loc[table["kind"] == "decode", "host_s"]
        rows.append({"engine": r.engine, "model": model, "device": device_name, "dtype": str(loaded.dtype)[6:],
                     "kv_budget_slots": summary["kv_budget_slots"], "serve_s": serve_s, "requests": requests,
                     "cuda_graphs": summary["cuda_graphs"], "graphs_note": graphs_note,
                     **{f"real_{k}": v for k, v in figures(summary, iterations).items()},
                     "decode_step_host_ms_p50": 1e3 * float(decode_host.median()) if len(decode_host) else np.nan,
                     **recorder.device_share(),
                     "max_memory_allocated_gib": torch.cuda.max_memory_allocated(device) / 2**30 if cuda else np.nan})
        write_table(rows, out)
        del setup, recorder
        release_memory()
        pack(out)
    del loaded
    release_memory()
    fitted = pd.concat(steps, ignore_index=True).assign(phase="runs", shape=lambda d: d.index)
    scheduler_s = scheduler_seconds([f for _, f in frames.values()])
    env = {"model": model, "dtype": rows[0]["dtype"], "device": device_name}
    hw = calibrated(load_hardware(fit_base(device_name)), f"{fit_base(device_name)}-{model}-claim", fitted, env,
                    scheduler_s)
    write_preset(hw, out / "preset.yaml", f"Fitted by `python -m pagedbench.studies.claim` to the {len(fitted)} "
                 f"iterations of its real runs (ENGINE/steps.parquet); not a conf/hardware preset.")
    residuals = hw.fitted["source"]["residuals"]
    print(f"fit: MAPE {100 * residuals['mape']:.1f}% on {len(fitted)} iterations of {len(runs)} engines",
          file=sys.stderr)
    for r, row in zip(runs, rows):
        sim_slots = row["kv_budget_slots"]
        sim_cfg = {**r.sim_cfg, "backend": {**r.sim_cfg["backend"], "kv_budget_slots": sim_slots},
                   "hardware": asdict(hw)}
        setup = build_sim(replace(r.sim.backend, kv_budget_slots=sim_slots), r.sim.model, hw, r.sim.engine,
                          r.sim.limits, r.sim_cfg["gpu_memory_utilization"])
        summary, iterations = protocol.step("sim", lambda: serve(r.sim, sim_cfg, setup, queue, out / r.engine / "sim"),
                                            engine=r.engine)
        sim = figures(summary, iterations)
        row.update({f"sim_{k}": v for k, v in sim.items()})
        real = row["real_output_tokens_per_s"]
        row["sim_error_pct"] = 100 * (sim["output_tokens_per_s"] - real) / real if real else np.nan
    table = write_table(rows, out)
    pack(out)
    return table


def ratios(table: pd.DataFrame) -> list[str]:
    """Paged's output tok/s over each other engine's, real and sim."""
    by = table.set_index("engine")
    if "paged" not in by.index:
        return []
    lines = []
    for engine in by.index.drop("paged"):
        real = by.at["paged", "real_output_tokens_per_s"] / by.at[engine, "real_output_tokens_per_s"]
        sim = (by.at["paged", "sim_output_tokens_per_s"] / by.at[engine, "sim_output_tokens_per_s"]
               if "sim_output_tokens_per_s" in by else np.nan)
        lines.append(f"paged / {engine}: {real:.2f}x real, {sim:.2f}x sim")
    return lines


def problems(model: str, engines: list[str], requests: int, serve_s: float, slots: int | None,
             extra: list[str], trace: Path | None = None) -> list[str]:
    found = [f"unknown engine {e!r}; the claim's engines: {', '.join(ENGINES)}" for e in engines if e not in ENGINES]
    if requests < 2:
        found.append(f"--requests {requests}: the queue needs at least 2 requests (the last one ends the run)")
    if trace is not None and not trace.is_file():
        found.append(f"--trace {trace}: no such file (python -m pagedbench.workloads.write_trace {trace} sharegpt "
                     f"num_requests={requests} writes one)")
    if not serve_s > 0:
        found.append(f"--serve-s {serve_s}: must be > 0")
    try:
        spec = load_model(model)
        need = slots if slots is not None else paper_slots(model)
        if need < spec.max_seq_len:
            found.append(f"{need} KV slots hold no {spec.max_seq_len}-token request: Orca (Max) could batch none")
    except (ValueError, FileNotFoundError) as err:
        found.append(str(err))
    if not found:
        try:
            compose_runs(model, engines, requests, 0, "auto", extra, trace)
        except (HydraException, ValueError) as err:
            found.append(f"config: {str(err).splitlines()[0]}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.studies.claim", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="opt-13b")
    parser.add_argument("--dtype", default="auto", help="the real backend's (auto: float16 on a GPU)")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--requests", type=int, default=1500, help="the offline ShareGPT queue's length")
    parser.add_argument("--serve-s", type=float, default=60.0, help="wall seconds each engine serves the queue")
    parser.add_argument("--kv-slots", type=int, help="the KV budget in token slots (default: the paper's "
                        "A100-40GB budget for the model)")
    parser.add_argument("--seed", type=int, default=0, help="the queue's draw")
    parser.add_argument("--trace", type=Path, help="read the queue from this trace file instead of drawing it "
                        "from ShareGPT (a device without the dataset and tokenizer packages; its arrivals are "
                        "replaced as the protocol says)")
    parser.add_argument("--profile-steps", type=int, default=20, help="steady steps profiled for device time")
    parser.add_argument("--cuda-graphs", choices=("auto", "on", "off"), default="auto",
                        help="greedy decode steps as CUDA graphs (engines/real/graphs.py); auto: on where every "
                        "engine's capture works, else off with the reason in claim.csv (default)")
    parser.add_argument("--out", type=Path, default=OUTPUTS / "claim")
    parser.add_argument("overrides", nargs="*", help="more key=value overrides for both backends")
    args = parser.parse_args(argv)
    engines = args.engines.split(",")
    found = problems(args.model, engines, args.requests, args.serve_s, args.kv_slots, args.overrides, args.trace)
    for problem in found:
        print(f"error: {problem}", file=sys.stderr)
    if found:
        return 2
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    table = claim(args.model, engines, args.out, args.requests, args.serve_s, args.kv_slots, args.seed, args.dtype,
                  args.profile_steps, args.overrides, args.trace, args.cuda_graphs)
    columns = ["engine", "real_output_tokens_per_s", "sim_output_tokens_per_s", "sim_error_pct",
               "real_mean_decode_batch", "sim_mean_decode_batch", "real_kv_token_states", "step_wall_ms",
               "step_device_ms", "max_memory_allocated_gib"]
    print(table[[c for c in columns if c in table]].to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    print("\n".join(ratios(table)))
    print(f"paper: paged's mean batch on ShareGPT {PAPER_PAGED_BATCH} (OPT-13B, A100-40GB, Figure 13a)")
    print(f"\n{args.out / 'claim.csv'}, {args.out / 'claim.tar.gz'} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
