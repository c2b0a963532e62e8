"""The simulated executor: each iteration takes as long as the cost model says, on a virtual clock."""
from __future__ import annotations

from engines.batch import Batch


class SimExecutor:
    name = "sim"

    def __init__(self, cost_model):
        self.cost_model = cost_model
        self.clock = 0.0

    def now(self) -> float:
        return self.clock

    def execute(self, batch: Batch) -> float:
        """Advance the virtual clock by the iteration's modelled time; return that time."""
        duration = self.cost_model.iteration_time(batch.prefill_lens, batch.decode_context_lens)
        self.clock += duration
        return duration

    def wait_until(self, t: float) -> None:
        """Idle time costs nothing to simulate: jump to the next arrival."""
        self.clock = max(self.clock, t)
