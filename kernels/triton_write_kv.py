"""write_kv (reshape_and_cache) in Triton: store new tokens' K and V at their cache slots.

A slot is a flat index into the cache seen as [-1, num_kv_heads, head_dim], so the
same kernel serves the paged cache [num_blocks, block_size, num_kv_heads, head_dim]
and the contiguous arena [num_slots, num_kv_heads, head_dim]. A program stores
TOKENS tokens, all KV heads of each; a token with a negative slot is skipped.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagedbench.kernels.triton_launch import check_cache_pair, check_device, check_float, check_int, check_last_dim_dense, pow2

ELEMENTS_PER_PROGRAM = 4096   # tokens per program = this / (padded kv heads * padded head_dim), at least 1


@triton.jit
def _write_kv_kernel(
    key_ptr,            # [num_tokens, num_kv_heads, head_dim]
    value_ptr,          # [num_tokens, num_kv_heads, head_dim]
    k_cache_ptr,        # [num_blocks, block_size, num_kv_heads, head_dim] or [num_slots, num_kv_heads, head_dim]
    v_cache_ptr,        # same shape as k_cache
    slot_mapping_ptr,   # [num_tokens] int64; negative = skip
    num_tokens,
    stride_k_token, stride_k_head,
    stride_v_token, stride_v_head,
    stride_cache_slot, stride_cache_head,
    num_kv_heads, head_dim,
    KV_HEADS_PAD: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, TOKENS: tl.constexpr,
):
    tokens = tl.program_id(0).to(tl.int64) * TOKENS + tl.arange(0, TOKENS)
    slots = tl.load(slot_mapping_ptr + tokens, mask=tokens < num_tokens, other=-1)
    keep = slots >= 0                                             # [TOKENS]

    flat = tl.arange(0, KV_HEADS_PAD * HEAD_DIM_PAD)              # (head, dim) pairs of one token
    heads = flat // HEAD_DIM_PAD
    dims = flat % HEAD_DIM_PAD
    mask = keep[:, None] & ((heads < num_kv_heads) & (dims < head_dim))[None, :]

    cache_offsets = slots[:, None] * stride_cache_slot + (heads * stride_cache_head + dims)[None, :]
    k = tl.load(key_ptr + tokens[:, None] * stride_k_token + (heads * stride_k_head + dims)[None, :], mask=mask)
    tl.store(k_cache_ptr + cache_offsets, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
    v = tl.load(value_ptr + tokens[:, None] * stride_v_token + (heads * stride_v_head + dims)[None, :], mask=mask)
    tl.store(v_cache_ptr + cache_offsets, v.to(v_cache_ptr.dtype.element_ty), mask=mask)


def write_kv(key: torch.Tensor,          # [num_tokens, num_kv_heads, head_dim]
             value: torch.Tensor,        # [num_tokens, num_kv_heads, head_dim]
             k_cache: torch.Tensor,      # [num_blocks, block_size, num_kv_heads, head_dim] or [num_slots, num_kv_heads, head_dim]
             v_cache: torch.Tensor,      # same shape as k_cache
             slot_mapping: torch.Tensor  # [num_tokens] int64; a negative slot means skip
             ) -> None:
    """Store each new token's K and V at its slot (reshape_and_cache)."""
    check_cache_pair(k_cache, v_cache, (3, 4))
    num_kv_heads, head_dim = k_cache.shape[-2:]
    num_tokens = slot_mapping.shape[0]
    for name, t in (("key", key), ("value", value)):
        check_float(name, t)
        check_last_dim_dense(name, t)
        if t.shape != (num_tokens, num_kv_heads, head_dim):
            raise ValueError(f"{name} must have shape {(num_tokens, num_kv_heads, head_dim)}, got {tuple(t.shape)}")
    check_int("slot_mapping", slot_mapping, (torch.int64,))
    if slot_mapping.dim() != 1 or slot_mapping.stride(0) != 1:
        raise ValueError(f"slot_mapping must be 1-D and dense, got shape {tuple(slot_mapping.shape)}")
    check_device(_write_kv_kernel, key, value, k_cache, v_cache, slot_mapping)
    if num_tokens == 0:
        return

    kv_heads_pad, head_dim_pad = pow2(num_kv_heads), pow2(head_dim)
    tokens = max(1, ELEMENTS_PER_PROGRAM // (kv_heads_pad * head_dim_pad))
    flat_cache = k_cache.view(-1, num_kv_heads, head_dim)
    _write_kv_kernel[(triton.cdiv(num_tokens, tokens),)](
        key, value, k_cache, v_cache, slot_mapping, num_tokens,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        flat_cache.stride(0), flat_cache.stride(1), num_kv_heads, head_dim,
        KV_HEADS_PAD=kv_heads_pad, HEAD_DIM_PAD=head_dim_pad, TOKENS=tokens,
        num_warps=4,
    )
