"""Choose the kernel implementation: torch references or Triton kernels, one namespace.

    ops = load_ops("auto")      # Triton on a CUDA machine, the torch references otherwise
    ops.write_kv(key, value, k_cache, v_cache, slot_mapping)

The Triton modules are imported only when asked for, so `import kernels` (and the
CPU backend) never imports triton. The Triton set's two prefills are one kernel
(kernels/triton_prefix_prefill.py): `prefix_prefill_attention` (new tokens over a
cached prefix, read through the block table, then causally over themselves) and
`prefill_attention` (the same without a prefix: every engine's plain prefill, all
sequences in one launch, in the cache's dtype).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

IMPLS = ("torch", "triton", "auto")


@dataclass(frozen=True, slots=True)
class KernelOps:
    name: str
    write_kv: Callable
    paged_decode_attention: Callable
    contiguous_decode_attention: Callable
    prefill_attention: Callable
    prefix_prefill_attention: Callable
    copy_blocks: Callable


def load_ops(impl: str = "auto") -> KernelOps:
    """impl: "torch" (references), "triton" (kernels; CUDA, or TRITON_INTERPRET=1 on CPU), "auto"."""
    if impl not in IMPLS:
        raise ValueError(f"unknown kernel impl {impl!r}; valid: {', '.join(IMPLS)}")
    if impl == "auto":
        import torch
        impl = "triton" if torch.cuda.is_available() else "torch"
    from pagedbench.kernels import reference
    if impl == "torch":
        return KernelOps("torch", reference.write_kv, reference.paged_decode_attention,
                         reference.contiguous_decode_attention, reference.prefill_attention,
                         reference.prefix_prefill_attention, reference.copy_blocks)
    from pagedbench.kernels import triton_copy_blocks, triton_decode_attention, triton_prefix_prefill, triton_write_kv
    return KernelOps("triton", triton_write_kv.write_kv,
                     triton_decode_attention.paged_decode_attention,
                     triton_decode_attention.contiguous_decode_attention,
                     triton_prefix_prefill.prefill_attention, triton_prefix_prefill.prefix_prefill_attention,
                     triton_copy_blocks.copy_blocks)
