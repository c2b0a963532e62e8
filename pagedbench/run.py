"""A run: compose the config, build the trace and the engine, run, record (`python run.py`, `pagedbench run`).

    python run.py engine=paged workload=sharegpt
    python run.py -m engine=static,orca_max,orca_pow2,orca_oracle,paged

`entry()` is the command (run.py at the root is a shim that calls it); `run` serves one composed config into a
run folder, for the studies and the server that build on a run.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
import logging
from pathlib import Path
import sys
import traceback

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from pagedbench.engines.config import EngineConfig, SchedulerLimits
from pagedbench.engines.registry import engine_config
from pagedbench.engines.loop import EngineRunner
from pagedbench.engines.peers.replay import PEER_BACKENDS, PeerRunner, PeerUnavailable, peer_config
from pagedbench.engines.protocols import Backend, Runner
from pagedbench.engines.run_record import ServedRun
from pagedbench.engines.sim.build import SimBackendConfig, build_sim
from pagedbench.engines.specs.hardware import HardwareSpec
from pagedbench.engines.specs.model import ModelSpec
from pagedbench.results.record import provenance
from pagedbench.results.record.console import format_summary
from pagedbench.results.record.frames import iterations_frame, requests_frame
from pagedbench.results.record.identity import FolderRefused, RunIdentity, check_reuse, folder_lock, write_record
from pagedbench.results.record.store import ERROR, SUMMARY, clear_run, save_run, save_tables, write_json
from pagedbench.results.record.summary import MeasureConfig, RunSetting, build_summary
from pagedbench.results.record.wandb_backfill import log_run_folder
from pagedbench.results.record.wandb_logger import live_run, run_name, sweep_group
from pagedbench.results.sweeps.sweep_dir import register_resolvers, sweep_failures
from pagedbench.paths import CONF
from pagedbench.workloads import WorkloadConfig, build_workload, format_stats, trace_stats

log = logging.getLogger("pagedbench")
register_resolvers()
BACKENDS = ("sim", "real", *PEER_BACKENDS)


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


@dataclass(slots=True)
class RunConfig:
    """The config as typed, checked parts: every check runs here, before a trace is built or a model loaded."""

    engine: EngineConfig
    workload: WorkloadConfig
    model: ModelSpec
    limits: SchedulerLimits
    measure: MeasureConfig
    backend: object              # SimBackendConfig, RealBackendConfig or a peer's config
    hardware: HardwareSpec | None   # the sim's device

    @classmethod
    def parse(cls, cfg: DictConfig) -> "RunConfig":
        if cfg.backend.name not in BACKENDS:
            raise ValueError(f"backend={cfg.backend.name!r} is not one of {list(BACKENDS)}")
        engine = engine_config(plain(cfg.engine), cfg.swap_space)
        workload = WorkloadConfig.from_dict(plain(cfg.workload))
        model = ModelSpec.from_dict(plain(cfg.model))
        limits_cfg = plain(cfg.limits)
        if limits_cfg.get("max_seq_len") is None:
            limits_cfg["max_seq_len"] = model.max_seq_len
        limits = SchedulerLimits(**limits_cfg)
        limits.check_model(model.max_seq_len, model.name)
        measure = MeasureConfig.from_dict(plain(cfg.measure))
        if cfg.stop_at_last_arrival and workload.arrival == "offline":
            raise ValueError("stop_at_last_arrival=true stops at the last arrival, which an offline trace (every "
                             "request at t = 0) reaches before any request finishes; use it with "
                             "workload.arrival=poisson or gamma")
        if cfg.backend.name in PEER_BACKENDS:
            return cls(engine, workload, model, limits, measure, peer_config(plain(cfg.backend)), None)
        if cfg.backend.name == "sim":
            return cls(engine, workload, model, limits, measure, SimBackendConfig.from_dict(plain(cfg.backend)),
                       HardwareSpec.from_dict(plain(cfg.hardware)))
        from pagedbench.engines.real.build import RealBackendConfig   # torch loads only for the real backend

        backend = RealBackendConfig.from_dict(plain(cfg.backend))
        if backend.temperature <= 0 and workload.n > 1:
            raise ValueError(SAMPLING_NEEDS_TEMPERATURE)
        return cls(engine, workload, model, limits, measure, backend, None)

    def build_runner(self, gpu_memory_utilization: float) -> Runner:
        """What serves the trace: a peer, or our engine on the backend's builder output (a scheduler, an
        executor and what to record)."""
        if self.backend.name in PEER_BACKENDS:
            return PeerRunner(self.backend, self.model)
        return EngineRunner(self.build_backend(gpu_memory_utilization), self.engine.label, self.model.name)

    def build_backend(self, gpu_memory_utilization: float) -> Backend:
        """Our engine on the backend's builder: a scheduler, an executor and what to record."""
        if self.hardware is not None:
            return build_sim(self.backend, self.model, self.hardware, self.engine, self.limits, gpu_memory_utilization)
        from pagedbench.engines.real.build import build_real

        return build_real(self.backend, self.model, self.engine, self.limits)


SAMPLING_NEEDS_TEMPERATURE = ("parallel sampling (workload.n > 1) on the real backend needs backend.temperature > 0: "
                              "greedy samples of one prompt would all be the same")


class RunFailed(Exception):
    """The run ended but produced no result to summarise (or, `detail`, one that cannot be trusted)."""

    def __init__(self, message: str, detail: dict | None = None):
        super().__init__(message)
        self.detail = detail or {}


def run(cfg: DictConfig, run_dir: Path, metadata: dict | None = None) -> dict:
    """Check the config, build the trace and the runner (one of our engines or a peer), serve, judge and write
    the run folder; the summary. `metadata`: the run's provenance block (made here when the caller has none)."""
    rc = RunConfig.parse(cfg)
    if metadata is None:
        metadata = provenance.run_metadata(plain(cfg))
    engine, workload = rc.engine, rc.workload
    requests = build_workload(workload)
    width = max((max(r.n, r.beam_width) for r in requests), default=1)
    engine.check_width(width)
    if cfg.backend.name == "real" and rc.backend.temperature <= 0 and any(r.n > 1 for r in requests):
        raise ValueError(SAMPLING_NEEDS_TEMPERATURE)
    stats = trace_stats(requests)
    log.info("%s", format_stats(stats, workload.label))
    runner = rc.build_runner(cfg.gpu_memory_utilization)
    log.info("%s", runner.describe())
    wandb_config = {**plain(cfg), "metadata": without_config(metadata)}
    logging_live = (live_run(plain(cfg.logger), wandb_config, run_dir, wandb_name(engine, workload),
                             multirun_group(), runner.capacity, requests) if runner.live else nullcontext())
    with logging_live as live:
        served = runner.serve(requests, cfg.progress, bool(cfg.stop_at_last_arrival),
                              live.series if live is not None else None)
        summary = judge_and_save(cfg, rc, run_dir, metadata, served, stats, width)
        if live is not None:
            live.end(requests_frame(served.record), {k: v for k, v in summary.items() if k != "metadata"})
    if not runner.live:   # logger=wandb: the finished run, logged from its folder (no live series)
        log_run_folder(run_dir, plain(cfg.logger), multirun_group())
    title = " | ".join(p for p in (served.label, f"{workload.label} x{len(requests)}", served.where,
                                   cfg.backend.name, f"{served.record.wall_s:.1f}s wall") if p)
    log.info("\n%s\nresults: %s", format_summary(summary, title), run_dir)
    return summary


def judge_and_save(cfg: DictConfig, rc: RunConfig, run_dir: Path, metadata: dict, served: ServedRun,
                   stats: dict, width: int) -> dict:
    """Tabulate what was served, refuse a run that is no result (nothing finished; a peer's failed requests,
    kept with the tables in error.json so the next run is not skipped), summarise and save; the summary."""
    record, failures = served.record, served.failures
    iterations, reqs = iterations_frame(record), requests_frame(record)
    rejected = reqs[reqs["status"] == "rejected"]
    if len(rejected):
        log.warning("%d requests rejected, e.g. request %d: %s", len(rejected),
                    rejected["id"].iloc[0], rejected["rejected_reason"].iloc[0])
    if failures:
        log.warning("%d of %d requests failed, e.g. %s", len(failures), len(reqs), failures[0])
    detail = {"kind": "requests failed", "failures": failures} if served.peer else None
    if not (reqs["status"] == "finished").any():
        save_tables(run_dir, iterations, reqs, metadata)   # kept to see why; no summary: this is no result
        if served.peer:
            why = f"on {served.label}: {failures[0] if failures else 'none came back'}"
        elif len(rejected) == len(reqs) and len(reqs):
            why = (f": all {len(reqs)} requests were rejected, e.g. request {rejected['id'].iloc[0]}: "
                   f"{rejected['rejected_reason'].iloc[0]}")
        elif cfg.stop_at_last_arrival:
            why = f": the run stopped at t = {record.end_s:.3g} s (stop_at_last_arrival) before any request finished"
        else:
            why = f": none of {len(reqs)} requests finished"
        raise RunFailed(f"no request finished{' ' if served.peer else ''}{why}", detail)
    setting = RunSetting(rc.engine, rc.workload, rc.model.name, cfg.backend.name, served.fields,
                         1 if served.peer else width, stats, cfg.get("experiment_name"),
                         bool(cfg.stop_at_last_arrival), peer=served.label if served.peer else None)
    summary = build_summary(setting, iterations, reqs, record.wall_s, rc.measure.warmup_fraction,
                            rc.measure.slo, served.after_run, percentiles=rc.measure.percentiles)
    summary["metadata"] = metadata
    if failures:   # not a result: kept in error.json (with the tables), so the next run is not skipped
        save_tables(run_dir, iterations, reqs, metadata)
        raise RunFailed(f"{len(failures)} of {len(reqs)} requests failed on {served.label}, e.g. {failures[0]}",
                        {**detail, "partial_summary": summary})
    save_run(run_dir, iterations, reqs, summary, rc.measure.vllm_detailed)
    return summary


def wandb_name(engine: EngineConfig, workload: WorkloadConfig) -> str:
    """The run's wandb name before its summary exists: `run_name` of the summary's own fields."""
    return run_name({"engine": engine.label, "block_size": engine.block_size,
                     "workload": workload.label, "arrival": workload.arrival, "request_rate": workload.request_rate})


def without_config(metadata: dict) -> dict:
    return {k: v for k, v in metadata.items() if k != "config"}


def failed(message: str, run_dir: Path, status: int, detail: dict | None = None) -> None:
    """One line on the log; error.json in the run folder unless the folder is not ours (`detail` None);
    exit `status` for a single run. A multirun goes on with its other runs (it exits non-zero at its end)."""
    log.error("error: %s", message)
    if detail is not None:
        write_json({"error": message, **detail}, run_dir / ERROR)
    if HydraConfig.get().mode != RunMode.MULTIRUN:
        sys.exit(status)


@hydra.main(version_base=None, config_path=str(CONF), config_name="config")
def main(cfg: DictConfig) -> dict | None:
    """The run's summary (also what a sweep's launcher hands back to the sweeper); None if it failed."""
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    config = plain(cfg)
    code = provenance.code()
    identity = RunIdentity(config, code["result_code"], tuple(hydra_cfg.overrides.task), code["code_version"])
    try:
        with folder_lock(run_dir):
            done = check_reuse(run_dir, identity, bool(cfg.rerun))
            if done is not None:
                log.info("skipping %s: it already holds this run (same config and code; rerun=true runs it "
                         "again)", run_dir / SUMMARY)
                log_run_folder(run_dir, plain(cfg.logger), multirun_group())   # if logger=wandb and not yet logged
                return done
            clear_run(run_dir)
            metadata = provenance.run_metadata(config)
            write_record(run_dir, identity, metadata)
            return run(cfg, run_dir, metadata)
    except FolderRefused as err:
        failed(str(err), run_dir, 2)
    except ValueError as err:            # a bad value in the config or the data: one line, no stack trace
        failed(str(err), run_dir, 2, {"kind": "config"})
    except (RunFailed, PeerUnavailable) as err:
        failed(str(err), run_dir, 1, {"kind": "no result", **getattr(err, "detail", {})})
    except Exception as err:             # whatever else raised mid-run: its message, and where, in error.json
        failed(f"{type(err).__name__}: {err}", run_dir, 1, {"kind": type(err).__name__,
                                                           "traceback": traceback.format_exc()})
    return None


def entry(argv: list[str] | None = None) -> int:
    """The run command: `python run.py ARGS` (`argv`, default sys.argv[1:]); its exit status (Hydra exits 2 on
    a bad argument itself)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    problem = bad_group_choice(argv)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    saved = sys.argv
    sys.argv = [saved[0] if saved else "run.py", *argv]
    try:
        main()
    finally:
        sys.argv = saved
    failures = sweep_failures()
    if failures:
        print(f"error: {failures}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(entry())
