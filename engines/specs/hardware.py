"""What one device of the serving group can do: memory, FLOP/s, bytes/s, link speed.

Presets live in conf/hardware/*.yaml, each number with its datasheet source.
"""
from __future__ import annotations

from dataclasses import dataclass

from engines.specs.mapping import build_from_mapping


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
        value = self.iteration_overhead_s
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ValueError(f"hardware.iteration_overhead_s must be >= 0, got {value!r}")

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
