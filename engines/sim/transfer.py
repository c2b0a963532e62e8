"""How long the sim charges for moving KV data: device copies (copy-on-write, contiguous forks) and swaps.

The same function times every engine; it sees only how much moves.

- A device copy of `tokens` token slots reads and writes their K and V in
  every layer: 2 * tokens * kv_bytes_per_token / tp bytes per device at the
  device's effective bandwidth (one batched copy kernel per iteration, whose
  launch the iteration overhead already covers).
- A swap of `blocks` blocks (either direction) crosses the host link (PCIe)
  as one transfer per block, per layer, for K and for V, as vLLM's swap
  does: 2 * layers * blocks transfers of block_size tokens' K or V of one
  layer, each costing `host_transfer_latency_s` plus its bytes over
  `host_link_bandwidth`. Small blocks mean many small transfers: the
  latency term is why swapping suffers with them (Figure 19).
"""
from __future__ import annotations

from engines.specs.hardware import HardwareSpec
from engines.specs.model import ModelSpec


class TransferModel:
    __slots__ = ("model", "hw", "block_size", "_copy_s_per_token", "_swap_s_per_block")

    def __init__(self, model: ModelSpec, hw: HardwareSpec, block_size: int | None = None):
        self.model, self.hw, self.block_size = model, hw, block_size
        per_token = model.kv_bytes_per_token / model.tp          # K and V, every layer, one device's share
        self._copy_s_per_token = 2 * per_token / hw.effective_bandwidth
        if block_size and hw.host_link_bandwidth > 0:
            transfers = 2 * model.num_layers
            self._swap_s_per_block = transfers * hw.host_transfer_latency_s + \
                block_size * per_token / hw.host_link_bandwidth
        else:
            self._swap_s_per_block = None

    def copy_time(self, tokens: int) -> float:
        """Seconds to copy `tokens` token slots' K and V on the device."""
        return tokens * self._copy_s_per_token

    def swap_time(self, blocks: int) -> float:
        """Seconds to move `blocks` KV blocks across the host link, one way."""
        if not blocks:
            return 0.0
        if self._swap_s_per_block is None:
            raise ValueError(f"hardware preset {self.hw.name!r} has no host link (host_link_bandwidth), so the "
                             f"sim cannot time a swap; add one or use engine.preemption=recompute")
        return blocks * self._swap_s_per_block
