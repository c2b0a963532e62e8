"""pagedbench entry point: compose the config, build the trace and the engine, run, record.

    python run.py engine=paged workload=sharegpt
    python run.py -m engine=static,orca_max,orca_pow2,orca_oracle,paged
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from engines.config import EngineConfig, SchedulerLimits
from engines.loop import run_engine
from engines.protocols import Backend
from engines.sim.build import SimBackendConfig, build_sim
from engines.specs.hardware import HardwareSpec
from engines.specs.model import ModelSpec
from results.record.console import format_summary
from results.record.frames import iterations_frame, requests_frame
from results.record.store import SUMMARY, is_complete, read_summary, save_run, write_json
from results.record.summary import SLO, RunSetting, build_summary
from results.record.wandb_logger import log_to_wandb, sweep_group
from results.report.callback import register_resolvers
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


def build_backend(cfg: DictConfig, model: ModelSpec, engine: EngineConfig, limits: SchedulerLimits) -> Backend:
    """The backend's typed config, then its builder: a scheduler, an executor and what to record."""
    if cfg.backend.name == "sim":
        backend = SimBackendConfig.from_dict(plain(cfg.backend))   # checked before anything is built
        hardware = HardwareSpec.from_dict(plain(cfg.hardware))
        return build_sim(backend, model, hardware, engine, limits, cfg.gpu_memory_utilization)
    from engines.real.build import RealBackendConfig, build_real   # torch loads only here

    return build_real(RealBackendConfig.from_dict(plain(cfg.backend)), model, engine, limits)


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
    backend = build_backend(cfg, model, engine, limits)
    log.info("%s", backend.describe())
    log.info("engine %s: %s", engine.label, backend.scheduler.kv.describe())

    backend.executor.warmup()
    backend.executor.start_clock()
    record = run_engine(requests, backend.scheduler, backend.executor, progress=cfg.progress,
                        stop_at_last_arrival=cfg.stop_at_last_arrival)
    iterations, reqs = iterations_frame(record), requests_frame(record)
    setting = RunSetting(engine, workload, model.name, cfg.backend.name, backend.summary_fields(), width, stats,
                         cfg.get("experiment_name"), bool(cfg.stop_at_last_arrival))
    busy = float(iterations["duration_s"].sum())
    summary = build_summary(setting, iterations, reqs, record.wall_s, measure.get("warmup_fraction", 0.1), slo,
                            backend.after_run_fields(busy))
    save_run(run_dir, iterations, reqs, summary)
    log_to_wandb(plain(cfg.logger), plain(cfg), run_dir, iterations, reqs, summary, group=multirun_group())
    rejected = reqs[reqs["status"] == "rejected"]
    if len(rejected):
        log.warning("%d requests rejected, e.g. request %d: %s", len(rejected),
                    rejected["id"].iloc[0], rejected["rejected_reason"].iloc[0])
    title = (f"{engine.label} | {workload.label} x{len(requests)} | {model.name} on {backend.where} | "
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
