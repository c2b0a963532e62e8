"""The simulated executor: each iteration takes as long as the cost model says, on a virtual clock."""
from __future__ import annotations

from engines.batch import Batch


class SimExecutor:
    name = "sim"

    def __init__(self, cost_model):
        self.cost_model = cost_model

    def execute(self, batch: Batch) -> float:
        return self.cost_model.iteration_time(batch.prefill_lens, batch.decode_context_lens)

    def wait_until(self, now: float, t: float) -> float:
        """Idle time costs nothing to simulate: jump to the next arrival."""
        return max(now, t)
