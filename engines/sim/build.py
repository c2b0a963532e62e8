"""Map a model and hardware preset to the sim's cost model: the roofline, or the fitted linear model."""
from __future__ import annotations

from engines.sim.cost_model import CostModel
from engines.sim.linear_cost import LinearCostModel
from engines.specs.hardware import HardwareSpec
from engines.specs.model import ModelSpec


def build_cost_model(model: ModelSpec, hw: HardwareSpec, block_size: int | None = None):
    """The fitted model when the preset has one, else the roofline; `block_size` None = the contiguous layout."""
    if hw.fitted is not None:
        return LinearCostModel(model, hw, block_size)
    return CostModel(model, hw, block_size)
