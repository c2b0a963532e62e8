"""Map an engine config to its scheduler and KV manager (the builder the engine registry names)."""
from __future__ import annotations

from pagedbench.engines.config import EngineConfig, SchedulerLimits
from pagedbench.engines.protocols import Scheduler
from pagedbench.engines.registry import entry_of


def build_scheduler(engine: EngineConfig, limits: SchedulerLimits, capacity_slots: int,
                    bytes_per_slot: int = 0) -> Scheduler:
    """A scheduler over `capacity_slots` KV token slots: the same budget whichever engine it is.
    `bytes_per_slot` (one token's K and V) sizes the paged engine's host pool from its `swap_space`;
    0 leaves it without one."""
    if capacity_slots < 1:
        raise ValueError(f"the KV budget holds {capacity_slots} token slots; nothing can run")
    return entry_of(engine).build(engine, limits, capacity_slots, bytes_per_slot)
