"""What the sim charges to swap a sequence's KV against block size, beside recomputing it (Figure 19a).

Swap out and swap in each move `tokens` token slots across the host link as
`TransferModel` charges them (a fixed cost per block, layer, K and V, plus
bytes over the link); recomputation is the prefill of the same tokens, alone
in an iteration, by the cost model (the same at every block size).
"""
from __future__ import annotations

from pagedbench.engines.kv.block_pool import blocks_for
from pagedbench.engines.sim.build import build_cost_model
from pagedbench.engines.sim.transfer import TransferModel
from pagedbench.engines.specs.hardware import HardwareSpec
from pagedbench.engines.specs.model import ModelSpec

BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def swap_costs(model: ModelSpec, hw: HardwareSpec, tokens: int = 1024, block_sizes=BLOCK_SIZES) -> list[dict]:
    """One row per block size: one-way swap time and recompute time (ms), and their ratio."""
    recompute = build_cost_model(model, hw, None).iteration_time([tokens], [])
    rows = []
    for bs in block_sizes:
        swap = TransferModel(model, hw, bs).swap_time(blocks_for(tokens, bs))
        rows.append({"block_size": bs, "tokens": tokens, "swap_one_way_ms": 1e3 * swap,
                     "recompute_ms": 1e3 * recompute, "recompute_over_swap": recompute / swap})
    return rows
