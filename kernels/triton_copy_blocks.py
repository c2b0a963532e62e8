"""copy_blocks in Triton: copy whole cache blocks src[i] -> dst[i] in the K and V caches.

A block is one index of the cache's first dimension, so this serves the paged
cache [num_blocks, block_size, num_kv_heads, head_dim] (and, block = one slot, the
arena [num_slots, num_kv_heads, head_dim]). Program (i, c) copies chunk c of pair i.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagedbench.kernels.triton_launch import check_cache_pair, check_device, check_int

CHUNK = 2048   # elements per program


@triton.jit
def _copy_blocks_kernel(
    k_cache_ptr,   # [num_blocks, block_numel] (the cache, flattened after its first dim)
    v_cache_ptr,   # [num_blocks, block_numel]
    src_ptr,       # [num_pairs] int64
    dst_ptr,       # [num_pairs] int64
    block_numel,
    CHUNK: tl.constexpr,
):
    pair = tl.program_id(0)
    offsets = tl.program_id(1).to(tl.int64) * CHUNK + tl.arange(0, CHUNK)
    mask = offsets < block_numel
    src = tl.load(src_ptr + pair) * block_numel + offsets
    dst = tl.load(dst_ptr + pair) * block_numel + offsets
    tl.store(k_cache_ptr + dst, tl.load(k_cache_ptr + src, mask=mask), mask=mask)
    tl.store(v_cache_ptr + dst, tl.load(v_cache_ptr + src, mask=mask), mask=mask)


def copy_blocks(k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
                v_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
                src: torch.Tensor,      # [num_pairs] int64 source blocks
                dst: torch.Tensor,      # [num_pairs] int64 destination blocks
                ) -> None:
    """Copy whole blocks src[i] -> dst[i] (copy-on-write, swapping). Destinations must not be sources."""
    check_cache_pair(k_cache, v_cache, (3, 4))
    for name, t in (("src", src), ("dst", dst)):
        check_int(name, t, (torch.int64,))
        if t.dim() != 1 or t.stride(0) != 1:
            raise ValueError(f"{name} must be 1-D and dense, got shape {tuple(t.shape)}")
    if src.shape != dst.shape:
        raise ValueError(f"src {tuple(src.shape)} and dst {tuple(dst.shape)} must have the same length")
    check_device(_copy_blocks_kernel, k_cache, v_cache, src, dst)
    if src.numel() == 0:
        return
    block_numel = k_cache[0].numel()
    _copy_blocks_kernel[(src.numel(), triton.cdiv(block_numel, CHUNK))](
        k_cache, v_cache, src, dst, block_numel, CHUNK=CHUNK, num_warps=4)
