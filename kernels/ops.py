"""Pick the kernel implementation: torch references or Triton kernels."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True, slots=True)
class KernelOps:
    name: str
    write_kv: Callable
    paged_decode_attention: Callable
    contiguous_decode_attention: Callable
    prefill_attention: Callable
    copy_blocks: Callable


def load_ops(impl: str) -> KernelOps:
    if impl == "torch":
        from kernels import reference as r
        return KernelOps("torch", r.write_kv, r.paged_decode_attention, r.contiguous_decode_attention,
                         r.prefill_attention, r.copy_blocks)
    raise ValueError(f"unknown kernel implementation {impl!r}; valid: ['torch']")
