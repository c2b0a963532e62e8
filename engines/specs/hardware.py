"""What one device of the serving group can do: memory, FLOP/s, bytes/s, link speed.

Presets live in conf/hardware/*.yaml, each number with its datasheet source.
"""
from __future__ import annotations

from dataclasses import dataclass

from pagedbench.engines.specs.mapping import build_from_mapping


@dataclass(slots=True)
class HardwareSpec:
    name: str
    memory_bytes: int               # per device
    peak_flops: float               # dense fp16/bf16 tensor FLOP/s per device
    memory_bandwidth: float         # bytes/s per device
    flops_efficiency: float         # achievable fraction of peak FLOP/s for large GEMMs
    bandwidth_efficiency: float     # achievable fraction of peak memory bandwidth
    interconnect_bandwidth: float   # bytes/s per device for all-reduce (NVLink); used only when tp > 1
    iteration_overhead_s: float     # fixed cost of every iteration (scheduling, launches), every engine alike
    # Paged decode attention reads each block at this many context tokens' cost on top of its tokens
    # (address translation, a load per block): the paged kernel's penalty, larger for small blocks.
    paged_block_cost_tokens: float = 0.0
    # The host link swapping crosses (PCIe): bytes/s one way, and the fixed cost of one transfer (a block of
    # one layer's K or V). 0: no link modelled; the sim then refuses to time a swap.
    host_link_bandwidth: float = 0.0
    host_transfer_latency_s: float = 0.0
    # Whether swaps overlap the forward pass: True as vLLM runs them (a separate CUDA stream, each layer's
    # attention waiting only for its own layer's copies), False for copies that run before the forward pass
    # on the compute stream, as on a CPU. engines/sim/transfer.py holds the model of both.
    host_transfer_overlap: bool = False
    # A fitted preset (python -m pagedbench.studies.fit): linear iteration-time terms measured on one model,
    # which replace the roofline; None for a datasheet preset.
    fitted: dict | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"hardware.name must be a non-empty string, got {self.name!r}")
        if isinstance(self.memory_bytes, bool) or not isinstance(self.memory_bytes, int) \
                or self.memory_bytes < 1:
            raise ValueError(f"hardware.memory_bytes must be a positive integer, got {self.memory_bytes!r}")
        for key in ("peak_flops", "memory_bandwidth", "interconnect_bandwidth"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"hardware.{key} must be a positive number, got {value!r}")
        for key in ("flops_efficiency", "bandwidth_efficiency"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise ValueError(f"hardware.{key} must be in (0, 1], got {value!r}")
        for key in ("iteration_overhead_s", "paged_block_cost_tokens", "host_link_bandwidth",
                    "host_transfer_latency_s"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"hardware.{key} must be >= 0, got {value!r}")
        if not isinstance(self.host_transfer_overlap, bool):
            raise ValueError(f"hardware.host_transfer_overlap must be true or false, "
                             f"got {self.host_transfer_overlap!r}")
        if self.fitted is not None and not isinstance(self.fitted, dict):
            raise ValueError(f"hardware.fitted must be a mapping of fitted terms, got {self.fitted!r}")

    @classmethod
    def from_dict(cls, d) -> "HardwareSpec":
        """Build from a plain mapping (a YAML preset); an unknown key names the valid ones."""
        return build_from_mapping(cls, d, "hardware")

    @property
    def effective_flops(self) -> float:
        """FLOP/s one device sustains on large GEMMs."""
        return self.peak_flops * self.flops_efficiency

    @property
    def effective_bandwidth(self) -> float:
        """Bytes/s one device sustains streaming from its memory."""
        return self.memory_bandwidth * self.bandwidth_efficiency
