"""How long the sim charges for moving KV data: device copies (copy-on-write, contiguous forks) and swaps.

The same function times every engine; it sees only how much moves.

- A device copy of `tokens` token slots reads and writes their K and V in
  every layer: 2 * tokens * kv_bytes_per_token / tp bytes per device at the
  device's effective bandwidth (one batched copy kernel per iteration, whose
  launch the iteration overhead already covers). It runs on the compute
  stream, before the forward pass: its time adds to the iteration's.
- A swap of `blocks` blocks (either direction) crosses the host link (PCIe)
  as one transfer per block, per layer, for K and for V, as vLLM's swap
  does: 2 * layers * blocks transfers of block_size tokens' K or V of one
  layer, each costing `host_transfer_latency_s` plus its bytes over
  `host_link_bandwidth`. Small blocks mean many small transfers: the
  per-transfer cost is why swapping suffers with them (Figure 19).

The per-transfer cost of the GPU presets, 10 us, is an assumption, not a
measurement: what a cudaMemcpyAsync of a small pinned host <-> device chunk
costs in launch and DMA set-up, before its bytes move. Nobody has measured
it on an A100 for this project; `python -m pagedbench.studies.swap_bench --out DIR`
measures the present device and fits both numbers (per-transfer cost and
link bandwidth) to this model.

How a swap's time joins the iteration's (`iteration_time`) follows the
preset's `host_transfer_overlap`:

- overlap (the GPU presets), as vLLM of the paper's time ran it: its cache
  engine issues the swap-ins, then the swap-outs, layer by layer on a
  separate CUDA stream before the forward pass, recording one event per
  layer, and each layer's attention waits only for its own layer's event.
  With the compute stream's time C (copies, then the forward pass) spread
  evenly over the L layers, and the swaps' time T (each layer's share T / L,
  all of the swap-ins first when both directions move), layer k finishes no
  earlier than its transfers' end plus the compute of layers k..L-1, so the
  iteration takes

      max(C + T / L, T + C / L)        (one direction)

  the longer stream plus what cannot overlap: the first layer's transfers
  before its attention starts (compute-bound), or the last layer's compute
  after its transfers end (transfer-bound). With both directions the
  swap-outs' events are the ones waited on, so the swap-ins' whole time T_in
  comes first: T_in + max(C + T_out / L, T_out + C / L).
  The host issues every copy before it launches the forward pass, so the
  host's share of each transfer's fixed cost would not really overlap; the
  model does not split the fixed cost and overlaps all of it, which makes it
  the optimistic bound for small blocks, and the serial model the
  pessimistic one.
- serial (overlap off): C + T, the transfers before the forward pass, as a
  backend that copies on the compute stream runs them (this project's real
  backend does).
"""
from __future__ import annotations

from pagedbench.engines.specs.hardware import HardwareSpec
from pagedbench.engines.specs.model import ModelSpec


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
        """Seconds to move `blocks` KV blocks across the host link, one way, every layer (the transfers alone)."""
        if not blocks:
            return 0.0
        if self._swap_s_per_block is None:
            raise ValueError(f"hardware preset {self.hw.name!r} has no host link (host_link_bandwidth), so the "
                             f"sim cannot time a swap; add one or use engine.preemption=recompute")
        return blocks * self._swap_s_per_block

    def iteration_time(self, compute_s: float, blocks_out: int, blocks_in: int) -> float:
        """Seconds of an iteration whose compute stream runs `compute_s` (device copies, then the forward pass)
        while `blocks_out` blocks swap out and `blocks_in` swap in: overlapped layer by layer when the preset's
        `host_transfer_overlap` says so, else one after the other (see the module docstring)."""
        swap_out, swap_in = self.swap_time(blocks_out), self.swap_time(blocks_in)
        if not self.hw.host_transfer_overlap:
            return compute_s + swap_out + swap_in
        if not (swap_out or swap_in):
            return compute_s
        ahead, last = (swap_in, swap_out) if swap_out else (0.0, swap_in)   # the stream runs swap-ins first
        layers = self.model.num_layers
        return ahead + max(compute_s + last / layers, last + compute_s / layers)
