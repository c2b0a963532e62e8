"""Check the sim's beam model against the real backend's beam search on the same requests.

    python -m pagedbench.studies.beam_check [--widths 2 4 6] [--requests 32] [--out outputs/beam_check]

For each beam width, the same Alpaca requests (offline, their true output
lengths) run on the real backend (the tiny model, the paged engine, a CPU)
and their beam search's choices are recorded: at every step, which old beam
(by rank) each new beam extends. The sim's model (`engines/sim/beam_model.py`)
draws those ranks independently with probability proportional to
decay ** rank; its decay is fitted here to the real ranks by maximum
likelihood. The same requests then run on the sim, with the same KV slots,
under the fitted decay and under the default (1.0), and the paged engine's
memory saving is compared with the real one: the figure the model exists to
produce. Both savings are read over iterations, unweighted (the two clocks
differ), and the real beams' mean number of distinct parents per step is
shown beside the model's.

The real model has random weights, so its beams say how *this* model's
search branches, not how a trained OPT-13B's does: the check is of the
mechanism (beam survival -> block sharing -> saving), on equal terms.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from pagedbench.engines.config import PagedEngineConfig, SchedulerLimits
from pagedbench.engines.loop import run_engine
from pagedbench.engines.protocols import Executor
from pagedbench.engines.sim.beam_model import BeamModel, fit_decay
from pagedbench.engines.sim.build import SimBackendConfig, build_sim
from pagedbench.engines.specs.presets import load_hardware, load_model
from pagedbench.paths import OUTPUTS
from pagedbench.results.record.frames import iterations_frame
from pagedbench.results.record.store import atomic_write
from pagedbench.workloads.build import build_workload
from pagedbench.workloads.config import WorkloadConfig

ENGINE = PagedEngineConfig(swap_space=1)   # 1 GiB of host memory: beams are swapped, never recomputed


def _requests(num: int, width: int, seed: int):
    return build_workload(WorkloadConfig(name="alpaca", num_requests=num, seed=seed, beam_width=width))


def _saving(iterations: pd.DataFrame) -> float:
    busy = iterations[iterations["unshared_slots"] > 0]
    return float((1 - busy["allocated_slots"] / busy["unshared_slots"]).mean()) if len(busy) else float("nan")


class ParentRanks:
    """An executor that runs another and records, at every decode step, which old beam each new beam extends.

    Beams are kept in score order, so a parent's index is its rank. It sees every decode step: the engine
    never fast-forwards through it.
    """

    fast_forward = False

    def __init__(self, inner: Executor):
        self.inner, self.name, self.ranks = inner, inner.name, []

    def warmup(self) -> None:
        self.inner.warmup()

    def start_clock(self) -> None:
        self.inner.start_clock()

    def now(self) -> float:
        return self.inner.now()

    def wait_until(self, t: float) -> None:
        self.inner.wait_until(t)

    def execute(self, batch) -> float:
        duration = self.inner.execute(batch)
        for seq in batch.decode:
            if seq.parents is not None:
                self.ranks.extend(seq.parents)
        return duration


def run_real(requests, budget_mib: float, seed: int):
    """Serve `requests` with the paged engine on the real backend; (iterations, parent ranks, KV slots)."""
    from pagedbench.engines.real.build import RealBackendConfig, build_real

    spec = load_model("tiny")
    setup = build_real(RealBackendConfig(device="cpu", kv_budget_mib=budget_mib, seed=seed), spec, ENGINE,
                       SchedulerLimits(max_seq_len=spec.max_seq_len))
    executor = ParentRanks(setup.executor)
    executor.warmup()
    executor.start_clock()
    record = run_engine(requests, setup.scheduler, executor, progress=False)
    return iterations_frame(record), np.array(executor.ranks, dtype=np.int64), setup.num_slots


def run_sim(requests, slots: int, decay: float, seed: int) -> pd.DataFrame:
    """The same requests on the sim (the fitted CPU preset), with the real run's KV slots and beam decay `decay`."""
    spec = load_model("tiny")
    # Persistence 0: the check fits the model's draws to this random-weight model's own beams, drawn afresh.
    setup = build_sim(SimBackendConfig(kv_budget_slots=slots, beam_parent_decay=decay, beam_persistence=0.0,
                                       seed=seed), spec,
                      load_hardware("cpu-tiny"), ENGINE, SchedulerLimits(max_seq_len=spec.max_seq_len))
    return iterations_frame(run_engine(requests, setup.scheduler, setup.executor, progress=False))


def distinct_parents(ranks: np.ndarray, width: int) -> float:
    steps = ranks[: len(ranks) // width * width].reshape(-1, width)
    return float(np.mean([len(set(s)) for s in steps.tolist()])) if len(steps) else float("nan")


def model_distinct_parents(width: int, decay: float, steps: int = 4000, seed: int = 0) -> float:
    model = BeamModel(decay, seed)
    return float(np.mean([len(set(model.parents(0, width))) for _ in range(steps)]))


def check(widths: list[int], num_requests: int, budget_mib: float, seed: int) -> pd.DataFrame:
    rows = []
    for width in widths:
        requests = _requests(num_requests, width, seed)
        real, ranks, slots = run_real(requests, budget_mib, seed)
        decay = fit_decay(ranks, width)
        fitted, uniform = run_sim(requests, slots, decay, seed), run_sim(requests, slots, 1.0, seed)
        rows.append({"beam_width": width, "requests": len(requests), "kv_slots": slots, "fitted_decay": decay,
                     "real_distinct_parents": distinct_parents(ranks, width),
                     "model_distinct_parents": model_distinct_parents(width, decay),
                     "real_saving": _saving(real), "sim_saving_fitted": _saving(fitted),
                     "sim_saving_decay_1": _saving(uniform)})
        print(pd.DataFrame(rows[-1:]).to_string(index=False), flush=True)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.studies.beam_check", description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[2, 4, 6])
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--kv-mib", type=float, default=16.0, help="the real run's KV budget (MiB)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=OUTPUTS / "beam_check")
    args = parser.parse_args(argv)
    if any(w < 2 for w in args.widths) or args.requests < 1:
        parser.error("beam widths must be >= 2 and --requests >= 1")
    table = check(args.widths, args.requests, args.kv_mib, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out / "beam_check.csv", lambda tmp: table.to_csv(tmp, index=False))
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"wrote {args.out / 'beam_check.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
