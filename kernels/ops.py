"""Choose the kernel implementation: torch references or Triton kernels, one namespace.

    ops = load_ops("auto")      # Triton on a CUDA machine, the native CPU kernels on a CPU (the references
                                # where no C compiler is found)
    ops.write_kv(key, value, k_cache, v_cache, slot_mapping)

The Triton modules are imported only when asked for, so `import kernels` (and the
CPU backend) never imports triton. The Triton set's two prefills are one kernel
(kernels/triton_prefix_prefill.py): `prefix_prefill_attention` (new tokens over a
cached prefix, read through the block table, then causally over themselves) and
`prefill_attention` (the same without a prefix: every engine's plain prefill, all
sequences in one launch, in the cache's dtype). The "cpu" set (kernels/cpu_native.py)
is decode attention and the KV write in C (read in place), the plain prefill in torch tile by
tile (causal: no key past a tile scored), and the references' prefix prefill and block copies.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

IMPLS = ("torch", "cpu", "triton", "auto")
TABLE_LOADS = ("position", "block")   # the paged decode kernel's block-table loads: one per position, or per block
DEFAULT_NUM_WARPS = 4                 # the Triton decode kernel's warps per program


def num_warps_problem(num_warps: int | None) -> str | None:
    """Why `num_warps` is no warp count for the Triton decode kernel (None: its default), or None if it is one."""
    if num_warps is None or (1 <= num_warps <= 32 and not num_warps & (num_warps - 1)):
        return None
    return f"num_warps must be a power of two from 1 to 32 (None = {DEFAULT_NUM_WARPS}), got {num_warps}"


@dataclass(frozen=True, slots=True)
class KernelOps:
    name: str
    write_kv: Callable
    paged_decode_attention: Callable
    contiguous_decode_attention: Callable
    prefill_attention: Callable
    prefix_prefill_attention: Callable
    copy_blocks: Callable


def resolve(impl: str = "auto", device: str = "auto") -> str:
    """The set "auto" means on `device` ("auto": cuda when there is one): triton on cuda, cpu on a CPU where
    the C kernels build, torch otherwise; any other name is itself."""
    if impl not in IMPLS:
        raise ValueError(f"unknown kernel impl {impl!r}; valid: {', '.join(IMPLS)}")
    if impl != "auto":
        return impl
    if device == "auto":
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        return "triton"
    from pagedbench.kernels import cpu_native
    return "cpu" if cpu_native.available()[0] else "torch"


def load_ops(impl: str = "auto", device: str = "auto") -> KernelOps:
    """impl: "torch" (references), "cpu" (C decode attention and KV write, a tiled prefill, the rest references'),
    "triton" (kernels; CUDA, or TRITON_INTERPRET=1 on CPU), "auto" (`resolve`)."""
    impl = resolve(impl, device)
    from pagedbench.kernels import reference
    if impl == "cpu":
        from pagedbench.kernels import cpu_native
        ok, why = cpu_native.available()
        if not ok:
            raise cpu_native.NativeUnavailable(why)
        return KernelOps("cpu", cpu_native.write_kv, cpu_native.paged_decode_attention,
                         cpu_native.contiguous_decode_attention, cpu_native.prefill_attention,
                         cpu_native.prefix_prefill_attention, cpu_native.copy_blocks)
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
