"""Set up the simulated backend for one run: its typed config, the KV budget, the scheduler and the executor.

The sim's counterpart of `engines/real/build.py`: `run.py` and every study
build the sim through `build_sim`, never by hand.
"""
from __future__ import annotations

from dataclasses import dataclass

from pagedbench.engines.build import build_scheduler
from pagedbench.engines.config import EngineConfig, SchedulerLimits
from pagedbench.engines.kv.budget import kv_budget
from pagedbench.engines.protocols import Scheduler
from pagedbench.engines.sim.beam_model import BeamModel
from pagedbench.engines.sim.cost_model import CostModel
from pagedbench.engines.sim.executor import SimExecutor
from pagedbench.engines.sim.linear_cost import LinearCostModel
from pagedbench.engines.sim.transfer import TransferModel
from pagedbench.engines.specs.hardware import HardwareSpec
from pagedbench.engines.specs.mapping import build_from_mapping
from pagedbench.engines.specs.model import ModelSpec


@dataclass(slots=True)
class SimBackendConfig:
    name: str = "sim"
    # KV budget in token slots; None derives it from the hardware preset (memory x utilisation - weights -
    # activations). A real run's kv_budget_slots replays that run on the sim with the same memory.
    kv_budget_slots: int | None = None
    beam_parent_decay: float = 1.0    # each new beam extends old beam r with probability ~ decay^r
    # Probability that a new beam continues the old beam of its own rank (engines/sim/beam_model.py): an
    # assumption, calibrated to the paper's Figure 15 savings by `python -m pagedbench.studies.beam_persistence`.
    beam_persistence: float = 0.95
    seed: int = 0                     # the beam model's draws
    # Run the quiet stretches of decode steps (no arrival, finish, preemption, copy or swap) without building
    # their batches (`pagedbench.engines.engine.Engine.fast_forward`): the same run, step for step; false keeps the
    # step-by-step path, the reference the fast one is tested against.
    fast_forward: bool = True

    def __post_init__(self) -> None:
        slots = self.kv_budget_slots
        if slots is not None and (isinstance(slots, bool) or not isinstance(slots, int) or slots < 1):
            raise ValueError(f"backend.kv_budget_slots must be a positive integer, got {slots!r}")
        if not 0 < self.beam_parent_decay <= 1:
            raise ValueError(f"backend.beam_parent_decay must be in (0, 1], got {self.beam_parent_decay!r}")
        if not isinstance(self.fast_forward, bool):
            raise ValueError(f"backend.fast_forward must be true or false, got {self.fast_forward!r}")
        if not 0 <= self.beam_persistence <= 1:
            raise ValueError(f"backend.beam_persistence must be in [0, 1], got {self.beam_persistence!r}")

    @classmethod
    def from_dict(cls, d: dict) -> "SimBackendConfig":
        return build_from_mapping(cls, d, "backend")


@dataclass(slots=True)
class SimSetup:
    scheduler: Scheduler
    executor: SimExecutor
    hardware: str
    tp: int
    budget_bytes: int
    num_slots: int
    budget_note: str     # how the budget was set

    @property
    def where(self) -> str:
        return self.hardware

    def describe(self) -> str:
        return self.budget_note

    def summary_fields(self) -> dict:
        return {"hardware": self.hardware, "tp": self.tp, "kv_budget_bytes": self.budget_bytes,
                "kv_budget_slots": self.num_slots}

    def after_run_fields(self, busy_s: float) -> dict:
        """Nothing: the sim's clock is its cost model."""
        return {}


def build_cost_model(model: ModelSpec, hw: HardwareSpec, block_size: int | None = None):
    """The fitted model when the preset has one, else the roofline; `block_size` None = the contiguous layout."""
    if hw.fitted is not None:
        return LinearCostModel(model, hw, block_size)
    return CostModel(model, hw, block_size)


def build_sim(backend: SimBackendConfig, model: ModelSpec, hardware: HardwareSpec, engine: EngineConfig,
              limits: SchedulerLimits, gpu_memory_utilization: float = 0.9) -> SimSetup:
    """Scheduler and virtual-clock executor over the KV budget that `backend` or the presets give."""
    slots = backend.kv_budget_slots
    if slots is not None:
        budget_bytes = slots * model.kv_bytes_per_token
        note = f"KV budget set to {slots:,} token slots"
    else:
        budget = kv_budget(model, hardware, gpu_memory_utilization, limits.max_num_batched_tokens,
                           limits.max_num_seqs)
        slots, budget_bytes, note = budget.num_slots, budget.kv_bytes, budget.describe()
    scheduler = build_scheduler(engine, limits, slots, model.kv_bytes_per_token // model.tp)
    block_size = engine.block_size   # None: the contiguous layout
    executor = SimExecutor(build_cost_model(model, hardware, block_size),
                           TransferModel(model, hardware, block_size),
                           BeamModel(backend.beam_parent_decay, backend.seed, backend.beam_persistence),
                           fast_forward=backend.fast_forward)
    return SimSetup(scheduler, executor, hardware.name, model.tp, budget_bytes, slots,
                    f"{model.name} on {hardware.name} x{model.tp}: {note}")
