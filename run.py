"""pagedbench entry point: compose the config, build the trace and the engine, run, record.

    python run.py engine=paged workload=sharegpt
    python run.py -m engine=static,orca_max,orca_pow2,orca_oracle,paged
"""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from engines.kv.budget import kv_budget
from engines.build import build_scheduler
from engines.config import EngineConfig, SchedulerLimits
from engines.sim.build import build_cost_model
from engines.specs.hardware import HardwareSpec
from engines.loop import run_engine
from engines.specs.model import ModelSpec
from engines.sim.beam_model import BeamModel
from engines.sim.executor import SimExecutor
from engines.sim.transfer import TransferModel
from results.record.store import SUMMARY, is_complete, read_summary, save_run, write_json
from results.report.callback import register_resolvers
from results.record.summary import SLO, summarize
from results.record.console import format_summary
from results.record.wandb_logger import log_to_wandb, sweep_group
from results.record.frames import iterations_frame, requests_frame
from paths import CONF
from workloads import WorkloadConfig, build_workload, format_stats, trace_stats

log = logging.getLogger("pagedbench")
register_resolvers()
BACKENDS = ("sim", "real")


def bad_group_choice(argv: list[str]) -> str | None:
    """One line naming the valid options, for a `group=option` argument whose option does not exist."""
    for arg in argv:
        key, sep, value = arg.lstrip("+~").partition("=")
        group = CONF / key
        if not sep or "." in key or not group.is_dir() or key.startswith("hydra/"):
            continue   # hydra/* groups also hold Hydra's own options (basic, joblib, submitit_local)
        options = sorted(p.stem for p in group.glob("*.yaml"))
        for option in value.split(","):   # a multirun sweep lists several
            if option and option != "null" and option not in options:
                return f"{key}={option} is not an option; valid: {', '.join(options)}"
    return None


def multirun_group() -> str | None:
    """Every run of one multirun shares a wandb group named after the sweep folder; a single run has none."""
    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    return sweep_group(HydraConfig.get().sweep.dir)


def plain(node) -> dict:
    return OmegaConf.to_container(node, resolve=True)


def build_sim(cfg: DictConfig, model: ModelSpec, engine: EngineConfig, limits: SchedulerLimits):
    """Scheduler and executor of the simulated backend, and what to record about them."""
    hardware = HardwareSpec.from_dict(plain(cfg.hardware))
    slots = cfg.backend.get("kv_budget_slots")
    if slots is not None:
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"backend.kv_budget_slots must be a positive integer, got {slots!r}")
        log.info("%s on %s x%d: KV budget set to %s token slots", model.name, hardware.name, model.tp,
                 f"{slots:,}")
        info = {"hardware": hardware.name, "tp": model.tp, "kv_budget_bytes": slots * model.kv_bytes_per_token,
                "kv_budget_slots": slots}
    else:
        budget = kv_budget(model, hardware, cfg.gpu_memory_utilization,
                           limits.max_num_batched_tokens, limits.max_num_seqs)
        log.info("%s on %s x%d: %s", model.name, hardware.name, model.tp, budget.describe())
        slots = budget.num_slots
        info = {"hardware": hardware.name, "tp": model.tp, "kv_budget_bytes": budget.kv_bytes,
                "kv_budget_slots": slots}
    scheduler = build_scheduler(engine, limits, slots, model.kv_bytes_per_token // model.tp)
    block_size = engine.block_size if engine.name == "paged" else None
    cost_model = build_cost_model(model, hardware, block_size)
    beams = BeamModel(cfg.backend.get("beam_parent_decay", 1.0), cfg.backend.get("seed", 0))
    executor = SimExecutor(cost_model, TransferModel(model, hardware, block_size), beams)
    return scheduler, executor, info, hardware.name


def build_real_backend(cfg: DictConfig, model: ModelSpec, engine: EngineConfig, limits: SchedulerLimits):
    from engines.real.build import RealBackendConfig, build_real, host_load   # torch loads only here

    setup = build_real(RealBackendConfig.from_dict(plain(cfg.backend)), model, engine, limits)
    log.info("%s: %s", model.name, setup.describe())
    load = host_load()
    if load["load_avg_1m"] > load["cpu_count"]:
        log.warning("the machine's load (%.1f over the last minute) exceeds its %d cores: other jobs share them, "
                    "so this run's wall-clock figures will read slow; time runs one at a time",
                    load["load_avg_1m"], load["cpu_count"])
    info = {"device": setup.device, "dtype": setup.dtype, "kernels": setup.kernels,
            "kv_budget_bytes": setup.budget_bytes, "kv_budget_slots": setup.num_slots,
            "torch_threads": load["torch_threads"], "cpu_count": load["cpu_count"],
            "load_avg_1m_start": load["load_avg_1m"]}
    setup.executor.warmup()
    return setup.scheduler, setup.executor, info, setup.device


def run(cfg: DictConfig, run_dir: Path) -> dict:
    engine = EngineConfig.from_dict(plain(cfg.engine))
    workload = WorkloadConfig.from_dict(plain(cfg.workload))
    model = ModelSpec.from_dict(plain(cfg.model))
    if cfg.backend.name not in BACKENDS:
        raise ValueError(f"backend={cfg.backend.name!r} is not one of {list(BACKENDS)}")
    limits_cfg = plain(cfg.limits)
    if limits_cfg.get("max_seq_len") is None:
        limits_cfg["max_seq_len"] = model.max_seq_len
    limits = SchedulerLimits(**limits_cfg)
    limits.check_model(model.max_seq_len, model.name)

    measure = plain(cfg.measure)
    slo = SLO(**measure.get("slo", {}))
    requests = build_workload(workload)
    width = max((max(r.n, r.beam_width) for r in requests), default=1)
    engine.check_width(width)
    if (cfg.backend.name == "real" and cfg.backend.get("temperature", 0) <= 0
            and any(r.n > 1 for r in requests)):
        raise ValueError("parallel sampling (workload.n > 1) on the real backend needs backend.temperature > 0: "
                         "greedy samples of one prompt would all be the same")
    stats = trace_stats(requests)
    log.info("%s", format_stats(stats, workload.label))
    build = build_sim if cfg.backend.name == "sim" else build_real_backend
    scheduler, executor, info, where = build(cfg, model, engine, limits)
    log.info("engine %s: %s", engine.label, scheduler.kv.describe())

    if hasattr(executor, "start_clock"):
        executor.start_clock()
    record = run_engine(requests, scheduler, executor, progress=cfg.progress,
                        stop_at_last_arrival=cfg.stop_at_last_arrival)
    iterations, reqs = iterations_frame(record), requests_frame(record)
    summary = {
        "engine": engine.label, "block_size": engine.block_size if engine.name == "paged" else None,
        "preemption": engine.preemption if engine.name == "paged" else None,
        "width": width,
        "workload": workload.label, "model": model.name, "backend": cfg.backend.name, **info,
        "arrival": workload.arrival, "request_rate": workload.request_rate, "workload_seed": workload.seed,
        "duration_s": workload.duration_s, "trace_draws": stats["count"], "trace_distinct_pairs": stats["distinct_pairs"],
        "experiment": cfg.get("experiment_name"),
        **summarize(iterations, reqs, measure.get("warmup_fraction", 0.1), slo),
        "slo_ttft_s": slo.ttft_s, "slo_tpot_s": slo.tpot_s,
        "stopped_at_last_arrival": bool(cfg.stop_at_last_arrival),
        "wall_s": record.wall_s,
        "iterations_per_wall_s": len(iterations) / record.wall_s if record.wall_s > 0 else None,
    }
    if cfg.backend.name == "real":
        busy = float(iterations["duration_s"].sum())
        summary["forward_s"] = executor.forward_s
        summary["forward_fraction_of_iterations"] = executor.forward_s / busy if busy > 0 else None
        summary["load_avg_1m_end"] = os.getloadavg()[0]
    save_run(run_dir, iterations, reqs, summary)
    log_to_wandb(plain(cfg.logger), plain(cfg), run_dir, iterations, reqs, summary, group=multirun_group())
    rejected = reqs[reqs["status"] == "rejected"]
    if len(rejected):
        log.warning("%d requests rejected, e.g. request %d: %s", len(rejected),
                    rejected["id"].iloc[0], rejected["rejected_reason"].iloc[0])
    title = (f"{engine.label} | {workload.label} x{len(requests)} | {model.name} on {where} | "
             f"{cfg.backend.name} | {record.wall_s:.1f}s wall")
    log.info("\n%s\nresults: %s", format_summary(summary, title), run_dir)
    return summary


@hydra.main(version_base=None, config_path="conf", config_name="config")
def main(cfg: DictConfig) -> dict | None:
    """The run's summary (also what a sweep's launcher hands back to the sweeper); None if it failed."""
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    if is_complete(run_dir) and not cfg.rerun:
        log.info("skipping %s: it already holds a finished run (rerun=true runs it again)", run_dir / SUMMARY)
        return read_summary(run_dir)
    try:
        return run(cfg, run_dir)
    except ValueError as err:
        # A bad value in the config or the data: one line, not a stack trace.
        log.error("error: %s", err)
        write_json({"error": str(err)}, run_dir / "error.json")
        if hydra_cfg.mode != RunMode.MULTIRUN:
            sys.exit(2)
        return None


if __name__ == "__main__":
    problem = bad_group_choice(sys.argv[1:])
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    main()
