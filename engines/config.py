"""Engine and scheduler-limit configs, checked when built: one typed config per kind of engine.

`ContiguousEngineConfig` (static, orca) holds what a contiguous engine
reads, `PagedEngineConfig` what the paged engine reads; the engine registry
(engines/registry.py: `engine_config`) turns an `engine` group into the right
one. Each answers what the other parts ask of any engine (`block_size`: None
for the contiguous layout, `preemption`, `check_width`, `variant`, `label`),
so no caller asks which kind it is.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from pagedbench.engines.kv.arena import ALLOCATORS
from pagedbench.engines.specs.mapping import build_from_mapping
from pagedbench.engines.kv.reservation import Reservation

CONTIGUOUS = ("static", "orca")   # the kinds (an engine group's `name`) this module's contiguous config holds
PREEMPTION = ("auto", "recompute", "swap")


def label_of(variant: str) -> str:
    """An engine variant's label, derived from its name (engines/registry.py): orca_max -> orca-max."""
    return variant.replace("_", "-")


@dataclass(slots=True)
class ContiguousEngineConfig:
    """static or orca: one contiguous KV region per sequence, reserved at admission; never preempts."""

    name: str                   # static | orca
    reservation: str = "max"    # orca: max | pow2 | oracle (static always reserves max_seq_len)
    allocator: str = "buddy"    # buddy | first_fit

    def __post_init__(self) -> None:
        if self.name not in CONTIGUOUS:
            raise ValueError(f"unknown contiguous engine {self.name!r}; valid: {list(CONTIGUOUS)}")
        if self.name == "static" and self.reservation != "max":
            raise ValueError("the static engine always reserves max_seq_len: engine.reservation must be max")
        valid = [r.value for r in Reservation]
        if self.reservation not in valid:
            raise ValueError(f"engine.reservation={self.reservation!r} is not one of {valid}")
        if self.allocator not in ALLOCATORS:
            raise ValueError(f"engine.allocator={self.allocator!r} is not one of {sorted(ALLOCATORS)}")

    @property
    def block_size(self) -> None:
        """No blocks: the contiguous layout (cost models and KV tensors read None as that)."""
        return None

    @property
    def preemption(self) -> None:
        """Never preempts: a region is reserved whole at admission."""
        return None

    def check_width(self, width: int) -> None:
        """Any width: each sequence of a group gets its own region."""

    @property
    def variant(self) -> str:
        """The engine variant's name in the registry: static, orca_max, orca_pow2, orca_oracle."""
        return f"{self.name}_{self.reservation}" if self.name == "orca" else self.name

    @property
    def label(self) -> str:
        """The engine variant as records name it: static, orca-max, orca-pow2, orca-oracle."""
        return label_of(self.variant)


@dataclass(slots=True)
class PagedEngineConfig:
    """paged (vLLM): fixed-size blocks through block tables, preemption by recompute or swap."""

    name: str = "paged"
    block_size: int = 16        # token slots per block (a power of two)
    watermark: float = 0.01     # fraction of blocks admission leaves free (vLLM's default)
    preemption: str = "auto"    # recompute | swap | auto (vLLM: recompute one sequence, swap a group)
    swap_space: float = 4.0     # GiB of host memory for swapped blocks (vLLM's default), per device: the
                                # run's top-level `swap_space`

    def __post_init__(self) -> None:
        if self.name != "paged":
            raise ValueError(f"a paged engine config is named 'paged', got {self.name!r}")
        bs = self.block_size
        if not isinstance(bs, int) or bs < 1 or bs & (bs - 1) or bs > 1024:
            raise ValueError(f"engine.block_size must be a power of two from 1 to 1024, got {bs!r}")
        if not 0.0 <= self.watermark < 1.0:
            raise ValueError(f"engine.watermark must be in [0, 1), got {self.watermark!r}")
        if self.preemption not in PREEMPTION:
            raise ValueError(f"engine.preemption={self.preemption!r} is not one of {list(PREEMPTION)}")
        if isinstance(self.swap_space, bool) or not isinstance(self.swap_space, (int, float)) \
                or not self.swap_space >= 0:
            raise ValueError(f"swap_space must be >= 0 GiB, got {self.swap_space!r}")
        if self.preemption == "swap" and self.swap_space == 0:
            raise ValueError("engine.preemption=swap needs swap_space > 0 GiB")

    def cpu_blocks(self, bytes_per_slot: int) -> int:
        """Blocks of the host pool: `swap_space` GiB over one block's K and V."""
        if bytes_per_slot <= 0:
            return 0
        return int(self.swap_space * 2**30) // (self.block_size * bytes_per_slot)

    def check_width(self, width: int) -> None:
        """Refuse, before a run, a workload the preemption rule cannot serve."""
        if width > 1 and self.preemption == "recompute":
            raise ValueError(f"engine.preemption=recompute cannot preempt a request of {width} sequences (vLLM "
                             f"recomputes only single-sequence groups); use engine.preemption=auto or swap")

    @property
    def variant(self) -> str:
        return self.name

    @property
    def label(self) -> str:
        return label_of(self.variant)


EngineConfig = ContiguousEngineConfig | PagedEngineConfig


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
