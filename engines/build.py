"""Map an engine config to its scheduler and KV manager."""
from __future__ import annotations

from engines.config import ContiguousEngineConfig, EngineConfig, SchedulerLimits
from engines.kv.contiguous import ContiguousKV
from engines.kv.paged import PagedKV
from engines.kv.reservation import Reservation
from engines.protocols import Scheduler
from engines.scheduling.iteration import IterationScheduler
from engines.scheduling.static import StaticScheduler


def build_scheduler(engine: EngineConfig, limits: SchedulerLimits, capacity_slots: int,
                    bytes_per_slot: int = 0) -> Scheduler:
    """A scheduler over `capacity_slots` KV token slots: the same budget whichever engine it is.
    `bytes_per_slot` (one token's K and V) sizes the paged engine's host pool from its `swap_space`;
    0 leaves it without one."""
    if capacity_slots < 1:
        raise ValueError(f"the KV budget holds {capacity_slots} token slots; nothing can run")
    if isinstance(engine, ContiguousEngineConfig):
        kv = ContiguousKV(capacity_slots, Reservation(engine.reservation), limits.max_seq_len, engine.allocator)
        return StaticScheduler(kv, limits) if engine.name == "static" else IterationScheduler(kv, limits)
    if capacity_slots < engine.block_size:
        raise ValueError(f"the KV budget of {capacity_slots} slots holds no block of {engine.block_size}")
    kv = PagedKV(capacity_slots, engine.block_size, engine.watermark, engine.cpu_blocks(bytes_per_slot))
    return IterationScheduler(kv, limits, engine.preemption)
