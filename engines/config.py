"""Engine and scheduler-limit configs, checked when built."""
from __future__ import annotations

from dataclasses import dataclass, fields

from engines.kv.arena import ALLOCATORS
from engines.specs.mapping import build_from_mapping
from engines.kv.reservation import Reservation

ENGINES = ("static", "orca", "paged")
PREEMPTION = ("auto", "recompute", "swap")


@dataclass(slots=True)
class EngineConfig:
    name: str
    reservation: str = "max"    # orca: max | pow2 | oracle (static always reserves max_seq_len)
    allocator: str = "buddy"    # static and orca: buddy | first_fit
    block_size: int = 16        # paged
    watermark: float = 0.01     # paged: fraction of blocks admission leaves free (vLLM's default)
    preemption: str = "auto"    # paged: recompute | swap | auto (vLLM: recompute one sequence, swap a group)
    swap_space: float = 4.0     # paged: GiB of host memory for swapped blocks (vLLM's default), per device

    def __post_init__(self) -> None:
        if self.name not in ENGINES:
            raise ValueError(f"unknown engine {self.name!r}; valid: {list(ENGINES)}")
        if self.name == "static" and self.reservation != "max":
            raise ValueError("the static engine always reserves max_seq_len: engine.reservation must be max")
        valid = [r.value for r in Reservation]
        if self.reservation not in valid:
            raise ValueError(f"engine.reservation={self.reservation!r} is not one of {valid}")
        if self.allocator not in ALLOCATORS:
            raise ValueError(f"engine.allocator={self.allocator!r} is not one of {sorted(ALLOCATORS)}")
        bs = self.block_size
        if not isinstance(bs, int) or bs < 1 or bs & (bs - 1) or bs > 1024:
            raise ValueError(f"engine.block_size must be a power of two from 1 to 1024, got {bs!r}")
        if not 0.0 <= self.watermark < 1.0:
            raise ValueError(f"engine.watermark must be in [0, 1), got {self.watermark!r}")
        if self.preemption not in PREEMPTION:
            raise ValueError(f"engine.preemption={self.preemption!r} is not one of {list(PREEMPTION)}")
        if isinstance(self.swap_space, bool) or not isinstance(self.swap_space, (int, float)) \
                or not self.swap_space >= 0:
            raise ValueError(f"engine.swap_space must be >= 0 GiB, got {self.swap_space!r}")
        if self.preemption == "swap" and self.swap_space == 0:
            raise ValueError("engine.preemption=swap needs engine.swap_space > 0 GiB")

    def cpu_blocks(self, bytes_per_slot: int) -> int:
        """Blocks of the host pool: `swap_space` GiB over one block's K and V (paged only)."""
        if self.name != "paged" or bytes_per_slot <= 0:
            return 0
        return int(self.swap_space * 2**30) // (self.block_size * bytes_per_slot)

    def check_width(self, width: int) -> None:
        """Refuse, before a run, a workload the preemption rule cannot serve."""
        if self.name == "paged" and width > 1 and self.preemption == "recompute":
            raise ValueError(f"engine.preemption=recompute cannot preempt a request of {width} sequences (vLLM "
                             f"recomputes only single-sequence groups); use engine.preemption=auto or swap")

    @property
    def label(self) -> str:
        """The engine variant as reports name it: static, orca-max, orca-pow2, orca-oracle, paged."""
        return f"orca-{self.reservation}" if self.name == "orca" else self.name

    @classmethod
    def from_dict(cls, d: dict) -> "EngineConfig":
        return build_from_mapping(cls, d, "engine")


@dataclass(slots=True)
class SchedulerLimits:
    """Limits every engine shares (vLLM's defaults)."""

    max_num_seqs: int = 256             # sequences in one iteration
    max_num_batched_tokens: int = 2048  # tokens in one prefill iteration
    max_seq_len: int = 2048             # prompt + output of one request (the model's context)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"limits.{f.name} must be a positive integer, got {value!r}")
        if self.max_num_batched_tokens < self.max_seq_len:
            # As vLLM without chunked prefill: otherwise a long request could never be prefilled (or
            # recomputed after a preemption) and engines would reject different requests of one trace.
            raise ValueError(f"limits.max_num_batched_tokens={self.max_num_batched_tokens} is below "
                             f"limits.max_seq_len={self.max_seq_len}: a request of max_seq_len tokens could "
                             f"never be prefilled in one iteration; raise max_num_batched_tokens or lower "
                             f"max_seq_len")

    def check_model(self, model_max_seq_len: int, model_name: str) -> None:
        """Refuse a max_seq_len the model cannot hold (its positions stop at its own maximum)."""
        if self.max_seq_len > model_max_seq_len:
            raise ValueError(f"limits.max_seq_len={self.max_seq_len} exceeds {model_name}'s maximum of "
                             f"{model_max_seq_len} tokens")
