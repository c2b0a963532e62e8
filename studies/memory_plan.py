"""Device memory of the GPU studies, planned before they run: weights, KV cache, activations, inputs.

    python -m pagedbench.studies.profile --model opt-1.3b --dtype float16 --plan h200     # one line, exit 0 or 2

Pure arithmetic on a model preset's shapes and a hardware preset's memory: no torch, no device, no
weights. At run time the studies size their buffers with the same functions from the memory the device
has free (`torch.cuda.mem_get_info`), so the plan printed for a named device is the one they run:

- a study fills at most FREE_FRACTION of the memory free when it sizes a buffer, and keeps
  WORKSPACE_BYTES beside its tensors (cuBLAS and Triton workspaces, the allocator's rounding);
- a plan for a device assumes CUDA_CONTEXT_BYTES of it taken before the first tensor, and fits when its
  peak is at most FREE_FRACTION of the rest (`DeviceMemory.limit_bytes`). A plan's peak sums its parts,
  some of which are freed before others are allocated: it is an upper bound.
"""
from __future__ import annotations

from collections.abc import Callable

from dataclasses import dataclass
import os
import sys

from pagedbench.engines.specs.model import ModelSpec
from pagedbench.engines.specs.presets import load_hardware

GIB = 2**30
FREE_FRACTION = 0.9                  # of the memory free when a buffer is sized, the most a study fills
CUDA_CONTEXT_BYTES = 3 * GIB // 2    # the CUDA context and libraries, before any tensor
WORKSPACE_BYTES = GIB                # kept free beside the planned tensors
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "auto": 2}   # auto: float16, as on a GPU


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a --dtype argument."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def gib(nbytes: float) -> str:
    return f"{nbytes / GIB:.1f}"


def weight_bytes(spec: ModelSpec, element_bytes: int) -> int:
    return spec.num_params * element_bytes


def kv_bytes_per_slot(spec: ModelSpec, element_bytes: int) -> int:
    """K and V of one token, all layers (as pagedbench.engines.real.kv_cache.bytes_per_slot)."""
    return 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * element_bytes


def activation_bytes(spec: ModelSpec, element_bytes: int, tokens: int, rows: int, longest_prefill: int) -> int:
    """A generous bound on the transient memory of one forward pass, the workspace included.

    tokens: the most tokens one pass computes; rows: the most rows it samples (logits kept);
    longest_prefill: the longest sequence one pass prefills. Per token, one layer's tensors alive at
    once (Q/K/V, their contiguous copies and the fp32 copies the prefill reference attends with, the
    attention output, the MLP's up projection and its activation, the residual stream); fp32 scores
    of the longest prefill twice over, as SDPA's math fallback would hold them; fp32 logits twice
    over. All of it doubled for the allocator's rounding and fragmentation.
    """
    h = spec.hidden_size
    per_token = (2 * spec.qkv_size + 6 * h + 2 * spec.mlp_up_size) * element_bytes + 4 * (spec.qkv_size + h)
    scores = 2 * spec.num_heads * longest_prefill ** 2 * 4
    logits = 2 * rows * spec.vocab_size * 4
    return 2 * (tokens * per_token + scores + logits) + WORKSPACE_BYTES


def host_available_bytes() -> int:
    """Host memory a study may take now: MemAvailable (free pages and reclaimable page cache) where
    /proc/meminfo has it, else the free pages."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def kv_slot_cap(free_bytes: int, bytes_per_slot: int, activations: int) -> int:
    """The most KV slots a study allocates with `free_bytes` free: FREE_FRACTION of it, less the activations."""
    return max(0, int(FREE_FRACTION * free_bytes) - activations) // bytes_per_slot


@dataclass(slots=True, frozen=True)
class DeviceMemory:
    name: str
    memory_bytes: int

    @property
    def free_bytes(self) -> int:
        """What a study finds free before its first tensor: the memory the CUDA context leaves."""
        return self.memory_bytes - CUDA_CONTEXT_BYTES

    @property
    def limit_bytes(self) -> int:
        """What a planned peak may reach: FREE_FRACTION of the free memory."""
        return int(FREE_FRACTION * self.free_bytes)


def device_memory(name: str) -> DeviceMemory:
    """A hardware preset's memory (conf/hardware/NAME.yaml, `memory_bytes`)."""
    return DeviceMemory(name, load_hardware(name).memory_bytes)


@dataclass(slots=True, frozen=True)
class StepPlan:
    """One GPU step's planned device memory: its parts (name, bytes), summed into the peak."""

    step: str
    device: DeviceMemory
    parts: tuple[tuple[str, int], ...]
    note: str = ""          # what the parts leave out or how they were chosen, e.g. pinned host memory
    problem: str = ""       # why the step cannot run as asked whatever its peak (e.g. a shape that cannot fit)

    @property
    def peak_bytes(self) -> int:
        return sum(nbytes for _, nbytes in self.parts)

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.device.limit_bytes and not self.problem

    def line(self) -> str:
        parts = ", ".join(f"{name} {gib(nbytes)}" for name, nbytes in self.parts)
        note = f"; {self.note}" if self.note else ""
        return (f"{self.step}: planned peak {gib(self.peak_bytes)} GiB of {gib(self.device.memory_bytes)} GiB "
                f"on {self.device.name} ({parts}{note})")

    def refusal(self) -> str:
        if self.problem:
            return f"{self.step}: {self.problem}"
        return (f"{self.step}: planned peak {gib(self.peak_bytes)} GiB exceeds the {gib(self.device.limit_bytes)} "
                f"GiB a study may use on {self.device.name} ({FREE_FRACTION:.0%} of its "
                f"{gib(self.device.memory_bytes)} GiB less {gib(CUDA_CONTEXT_BYTES)} GiB for the CUDA context)")


def report(make_plan: Callable[[], StepPlan]) -> int:
    """Make the plan and print its line; exit status 0 when it fits, else 2 with the refusal (or the reason
    no plan could be made, e.g. an unknown preset) on stderr."""
    try:
        plan = make_plan()
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(plan.line(), flush=True)
    if plan.fits:
        return 0
    print(f"error: {plan.refusal()}", file=sys.stderr)
    return 2
