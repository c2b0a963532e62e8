"""The replay's runs, in its one process: one run served and recorded as run.py records one, every
engine's real runs interleaved on one loaded model, and the protocol's log of its steps.

Each run's folder holds what a `python run.py` folder holds (iterations.parquet, requests.parquet,
summary.json with its provenance block), built by the same functions (`pagedbench.engines.loop.run_engine`,
`pagedbench.results.record`); the backend comes from its builder (`build_real` over the shared model, `build_sim`).
"""
from __future__ import annotations

from dataclasses import dataclass
import datetime
from pathlib import Path
import sys
import time
from typing import TYPE_CHECKING

import pandas as pd

from pagedbench.engines.loop import run_engine
from pagedbench.engines.protocols import Backend
from pagedbench.engines.real.build import build_real, load_real_model
from pagedbench.results.record import provenance
from pagedbench.results.record.frames import iterations_frame, requests_frame
from pagedbench.results.record.store import clear_run, save_run, write_json
from pagedbench.results.record.summary import RunSetting, build_summary
from pagedbench.studies.calibration import release_memory
from pagedbench.workloads import Request, trace_stats

if TYPE_CHECKING:
    from pagedbench.run import RunConfig


@dataclass(slots=True)
class EngineRuns:
    """One engine's two configs, composed and parsed as run.py parses one (`run.RunConfig`), and each as a
    plain dict for its runs' records."""

    engine: str           # conf/engine/NAME.yaml
    real: RunConfig
    real_cfg: dict
    sim: RunConfig
    sim_cfg: dict


def serve(rc: RunConfig, cfg: dict, setup: Backend, requests: list[Request],
          run_dir: Path) -> tuple[dict, pd.DataFrame]:
    """One run in this process, recorded as run.py records one (tables, then summary.json, in `run_dir`):
    its summary and iterations table."""
    clear_run(run_dir)
    width = max((max(r.n, r.beam_width) for r in requests), default=1)
    rc.engine.check_width(width)
    setup.executor.warmup()
    setup.executor.start_clock()
    record = run_engine(requests, setup.scheduler, setup.executor, progress=False,
                        stop_at_last_arrival=bool(cfg["stop_at_last_arrival"]))
    iterations, reqs = iterations_frame(record), requests_frame(record)
    if not (reqs["status"] == "finished").any():
        raise RuntimeError(f"{run_dir}: none of {len(reqs)} requests finished")
    setting = RunSetting(rc.engine, rc.workload, rc.model.name, cfg["backend"]["name"], setup.summary_fields(), width,
                         trace_stats(requests), cfg.get("experiment_name"), bool(cfg["stop_at_last_arrival"]))
    busy = float(iterations["duration_s"].sum())
    summary = build_summary(setting, iterations, reqs, record.wall_s, rc.measure.warmup_fraction, rc.measure.slo,
                            setup.after_run_fields(busy), percentiles=rc.measure.percentiles)
    summary["metadata"] = provenance.run_metadata(cfg)
    save_run(run_dir, iterations, reqs, summary, rc.measure.vllm_detailed)
    return summary, iterations


class StepLog:
    """The replay's steps as they run: what, when it started (UTC) and how long it took; protocol.json."""

    def __init__(self, path: Path):
        self.path, self.steps, self.t0 = path, [], time.perf_counter()

    def step(self, what: str, fn, **fields):
        started, clock = datetime.datetime.now(datetime.timezone.utc), time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - clock
        self.steps.append({"step": what, **fields, "started": started.isoformat(timespec="seconds"),
                           "seconds": round(seconds, 3)})
        print(f"[{time.perf_counter() - self.t0:6.0f} s] {what} {' '.join(f'{k}={v}' for k, v in fields.items())}: "
              f"{seconds:.1f} s", file=sys.stderr, flush=True)
        write_json({"steps": self.steps}, self.path)
        return result


def real_runs(runs: list[EngineRuns], requests: list[Request], repeats: int, out: Path,
              protocol: StepLog) -> dict[str, list[tuple[dict, pd.DataFrame]]]:
    """Every engine `repeats` times, interleaved, on one loaded model: engine -> [(summary, iterations)]."""
    backend, spec = runs[0].real.backend, runs[0].real.model
    if any(r.real.backend != backend for r in runs):
        raise RuntimeError("the engines' real backend configs differ; the replay loads one model for all")
    loaded = load_real_model(backend, spec)
    done: dict[str, list] = {r.engine: [] for r in runs}
    for k in range(1, repeats + 1):
        for r in runs:
            def one(r=r, k=k):
                setup = build_real(r.real.backend, r.real.model, r.real.engine, r.real.limits, loaded=loaded)
                return serve(r.real, r.real_cfg, setup, requests, out / r.engine / f"real_{k}")
            done[r.engine].append(protocol.step("real", one, engine=r.engine, repeat=k))
            release_memory()
    slots = {r.engine: {s["kv_budget_slots"] for s, _ in done[r.engine]} for r in runs}
    if any(len(s) != 1 for s in slots.values()):
        raise RuntimeError(f"the real repeats served different KV budgets (slots): {slots}")
    del loaded
    release_memory()
    return done
