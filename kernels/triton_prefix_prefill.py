"""Prefill in Triton, packed sequences of any lengths: new tokens attend over a cached context (prefix
prefill), then causally over themselves; `prefill_attention` is the same kernel without a context.

When a prompt's prefix is already in the paged cache (a shared system prompt, say), only the rest of
the prompt is prefilled (vLLM's context_attention_fwd). New token i of sequence s sits at position
context_lens[s] + i and attends over

1. the cached positions 0..context_lens[s]-1, read through block_tables[s]:
   slot = block_tables[s, pos // block_size] * block_size + pos % block_size;
2. the new tokens 0..i of its own sequence, whose K/V come from the `key`/`value` arguments.

A program handles one tile of BLOCK_M new tokens of one sequence for one query head (query head h
reads KV head h // group). It runs an online softmax, in fp32 and in base 2, first over the context
in tiles of BLOCK_N positions (masked past context_len; no tile at all when it is 0), then over the
new tokens up to the tile's last row, with the causal mask j <= i. Tiles past a sequence's new
tokens run no iterations and store nothing. The block size is a runtime shift, head_dim a runtime
mask over a power-of-two padded range.

The grid needs the longest run of new tokens. A caller that knows it passes `max_seqlen` (the real
executor builds cu_seqlens on the host); otherwise reading it from cu_seqlens is one host sync per call.
Without a context (`prefill_attention`, every engine's plain prefill) the context loop is compiled out
(HAS_CONTEXT) and no cache or block table is read.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagedbench.kernels.triton_launch import (check_cache_pair, check_contiguous, check_device, check_float, check_int,
                                   check_last_dim_dense, online_softmax_step, pow2)

LOG2E = 1.4426950408889634


@triton.jit(do_not_specialize=["group", "block_shift", "stride_table_seq"])   # fewer compiled variants
def _prefix_prefill_kernel(
    out_ptr,            # [num_tokens, num_heads, head_dim]
    query_ptr,          # [num_tokens, num_heads, head_dim]
    key_ptr,            # [num_tokens, num_kv_heads, head_dim]
    value_ptr,          # [num_tokens, num_kv_heads, head_dim]
    k_cache_ptr,        # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache_ptr,        # same shape as k_cache
    block_tables_ptr,   # [num_seqs, max_blocks_per_seq] int32
    context_lens_ptr,   # [num_seqs] int32, >= 0
    cu_seqlens_ptr,     # [num_seqs + 1] int32
    scale_log2,         # softmax scale * log2(e)
    group,              # query heads per KV head
    head_dim,
    block_shift,        # log2(block_size)
    stride_q_tok, stride_q_head,
    stride_k_tok, stride_k_head,
    stride_v_tok, stride_v_head,
    stride_o_tok, stride_o_head,
    stride_table_seq,
    stride_cache_slot, stride_cache_head,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    DOT_PRECISION: tl.constexpr,   # "ieee" for fp32 K/V (no tf32 rounding), else the default
    HAS_CONTEXT: tl.constexpr,     # False: plain prefill; the cache, block tables and context_lens are not read
):
    tile = tl.program_id(0)
    head = tl.program_id(1)
    seq = tl.program_id(2).to(tl.int64)
    kv_head = head // group

    seq_start = tl.load(cu_seqlens_ptr + seq)
    new_len = tl.load(cu_seqlens_ptr + seq + 1) - seq_start
    first_token = seq_start.to(tl.int64)
    if HAS_CONTEXT:
        context_len = tl.load(context_lens_ptr + seq)
    else:
        context_len = 0

    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)     # new-token index of each query row
    dims = tl.arange(0, HEAD_DIM_PAD)
    row_ok = rows < new_len
    dim_ok = dims < head_dim
    q = tl.load(query_ptr + (first_token + rows[:, None]) * stride_q_tok + head * stride_q_head + dims[None, :],
                mask=row_ok[:, None] & dim_ok[None, :], other=0.0)   # [BLOCK_M, HEAD_DIM_PAD]

    # A tile past this sequence's new tokens runs neither loop (both end at 0) and stores nothing.
    has_rows = tile * BLOCK_M < new_len
    context_end = tl.where(has_rows, context_len, 0)
    new_end = tl.where(has_rows, tl.minimum((tile + 1) * BLOCK_M, new_len), 0)   # this tile's rows see no further

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], tl.float32)

    # 1. The cached context, through the block table: every row sees every position below context_len.
    if HAS_CONTEXT:
        for tile_start in range(0, context_end, BLOCK_N):
            pos = tile_start + tl.arange(0, BLOCK_N)
            valid = pos < context_end
            block_index = pos >> block_shift
            block = tl.load(block_tables_ptr + seq * stride_table_seq + block_index, mask=valid, other=0)
            slots = (block.to(tl.int64) << block_shift) + (pos - (block_index << block_shift))
            kv_offsets = slots[:, None] * stride_cache_slot + kv_head * stride_cache_head + dims[None, :]
            kv_mask = valid[:, None] & dim_ok[None, :]
            k = tl.load(k_cache_ptr + kv_offsets, mask=kv_mask, other=0.0)            # [BLOCK_N, HEAD_DIM_PAD]
            scores = tl.dot(q.to(k.dtype), tl.trans(k), input_precision=DOT_PRECISION) * scale_log2   # [BLOCK_M, BLOCK_N]
            scores = tl.where(valid[None, :], scores, float("-inf"))
            v = tl.load(v_cache_ptr + kv_offsets, mask=kv_mask, other=0.0)            # [BLOCK_N, HEAD_DIM_PAD]
            # Finite: every tile holds a valid position.
            m_i, l_i, acc = online_softmax_step(scores, v, m_i, l_i, acc, DOT_PRECISION)

    # 2. The new tokens themselves, causally: row i sees new tokens 0..i.
    for tile_start in range(0, new_end, BLOCK_N):
        cols = tile_start + tl.arange(0, BLOCK_N)
        col_ok = cols < new_end
        tokens = first_token + cols[:, None]
        kv_mask = col_ok[:, None] & dim_ok[None, :]
        k = tl.load(key_ptr + tokens * stride_k_tok + kv_head * stride_k_head + dims[None, :],
                    mask=kv_mask, other=0.0)                                        # [BLOCK_N, HEAD_DIM_PAD]
        scores = tl.dot(q.to(k.dtype), tl.trans(k), input_precision=DOT_PRECISION) * scale_log2   # [BLOCK_M, BLOCK_N]
        scores = tl.where(col_ok[None, :] & (cols[None, :] <= rows[:, None]), scores, float("-inf"))
        v = tl.load(value_ptr + tokens * stride_v_tok + kv_head * stride_v_head + dims[None, :],
                    mask=kv_mask, other=0.0)                                        # [BLOCK_N, HEAD_DIM_PAD]
        # Finite: the first tile holds new token 0, which every row sees, so m_i is finite from then on.
        m_i, l_i, acc = online_softmax_step(scores, v, m_i, l_i, acc, DOT_PRECISION)

    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(out_ptr + (first_token + rows[:, None]) * stride_o_tok + head * stride_o_head + dims[None, :],
             out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & dim_ok[None, :])


def _check_new_tokens(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, num_kv_heads: int,
                      cu_seqlens: torch.Tensor) -> None:
    num_tokens, num_heads, head_dim = query.shape
    check_float("query", query)
    for name, t in (("query", query), ("key", key), ("value", value)):
        check_last_dim_dense(name, t)
    if key.shape != (num_tokens, num_kv_heads, head_dim) or value.shape != key.shape:
        raise ValueError(f"key and value must have shape {(num_tokens, num_kv_heads, head_dim)}, "
                         f"got {tuple(key.shape)} and {tuple(value.shape)}")
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads {num_heads} must be a multiple of num_kv_heads {num_kv_heads}")
    check_int("cu_seqlens", cu_seqlens, (torch.int32,))
    check_contiguous("cu_seqlens", cu_seqlens)
    if cu_seqlens.dim() != 1:
        raise ValueError(f"cu_seqlens must be [num_seqs + 1], got shape {tuple(cu_seqlens.shape)}")


def _launch(query, key, value, k_cache, v_cache, block_tables, context_lens, cu_seqlens, scale: float,
            max_seqlen: int | None, has_context: bool) -> torch.Tensor:
    """The kernel over every sequence's new tokens; `max_seqlen` None reads the longest from cu_seqlens (a sync)."""
    num_tokens, num_heads, head_dim = query.shape
    num_kv_heads = key.shape[1]
    num_seqs = cu_seqlens.numel() - 1
    out = torch.empty((num_tokens, num_heads, head_dim), dtype=query.dtype, device=query.device)
    if num_seqs <= 0 or num_tokens == 0:
        return out
    longest_new = int((cu_seqlens[1:] - cu_seqlens[:-1]).max()) if max_seqlen is None else int(max_seqlen)
    if longest_new <= 0:
        return out
    head_dim_pad = pow2(head_dim)
    block_m = 64 if head_dim_pad <= 128 else 32
    block_size = k_cache.shape[1] if has_context else 1
    flat_cache = k_cache.view(-1, num_kv_heads, head_dim) if has_context else key
    _prefix_prefill_kernel[(triton.cdiv(longest_new, block_m), num_heads, num_seqs)](
        out, query, key, value, k_cache, v_cache, block_tables, context_lens, cu_seqlens,
        scale * LOG2E, num_heads // num_kv_heads, head_dim, block_size.bit_length() - 1,
        query.stride(0), query.stride(1),
        key.stride(0), key.stride(1),
        value.stride(0), value.stride(1),
        out.stride(0), out.stride(1),
        block_tables.stride(0),
        flat_cache.stride(0), flat_cache.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_m, HEAD_DIM_PAD=head_dim_pad,
        DOT_PRECISION="ieee" if key.dtype == torch.float32 else "tf32",
        HAS_CONTEXT=has_context,
        num_warps=4,
    )
    return out


def prefill_attention(query: torch.Tensor,       # [num_tokens, num_heads, head_dim]
                      key: torch.Tensor,         # [num_tokens, num_kv_heads, head_dim]
                      value: torch.Tensor,       # [num_tokens, num_kv_heads, head_dim]
                      cu_seqlens: torch.Tensor,  # [num_seqs + 1] int32: sequence s is tokens cu[s]:cu[s+1]
                      scale: float,
                      max_seqlen: int | None = None,   # the longest sequence, when the caller knows it (no sync)
                      ) -> torch.Tensor:         # [num_tokens, num_heads, head_dim]
    """Causal attention of each packed sequence over its own new tokens, in one launch for all of them.

    key and value share a dtype; the softmax runs in fp32. With `max_seqlen` given (at least the longest
    sequence: a smaller one leaves rows unwritten) the launch needs no host sync.
    """
    num_kv_heads = key.shape[1] if key.dim() == 3 else 0
    if query.dim() != 3 or key.dim() != 3 or num_kv_heads == 0:
        raise ValueError(f"query and key must be [num_tokens, heads, head_dim], got {tuple(query.shape)} and "
                         f"{tuple(key.shape)}")
    _check_new_tokens(query, key, value, num_kv_heads, cu_seqlens)
    if key.dtype != value.dtype:
        raise ValueError(f"key {key.dtype} and value {value.dtype} must share a dtype")
    check_device(_prefix_prefill_kernel, query, key, value, cu_seqlens)
    # No context: the cache, block table and context_lens arguments are never read (HAS_CONTEXT=False).
    return _launch(query, key, value, key.unsqueeze(1), value.unsqueeze(1), cu_seqlens.view(-1, 1), cu_seqlens,
                   cu_seqlens, scale, max_seqlen, has_context=False)


def prefix_prefill_attention(query: torch.Tensor,        # [num_tokens, num_heads, head_dim] new tokens, packed
                             key: torch.Tensor,          # [num_tokens, num_kv_heads, head_dim] new tokens' K
                             value: torch.Tensor,        # [num_tokens, num_kv_heads, head_dim] new tokens' V
                             k_cache: torch.Tensor,      # [num_blocks, block_size, num_kv_heads, head_dim]
                             v_cache: torch.Tensor,      # [num_blocks, block_size, num_kv_heads, head_dim]
                             block_tables: torch.Tensor, # [num_seqs, max_blocks_per_seq] int32
                             context_lens: torch.Tensor, # [num_seqs] int32, >= 0: cached tokens before the new ones
                             cu_seqlens: torch.Tensor,   # [num_seqs + 1] int32: sequence s's new tokens are cu[s]:cu[s+1]
                             scale: float,
                             max_seqlen: int | None = None,   # the longest run of new tokens, if known (no sync)
                             ) -> torch.Tensor:          # [num_tokens, num_heads, head_dim]
    """Prefill after a cached prefix: new tokens attend over the cached context, then causally over themselves.

    key and value must have the cache's dtype (the new tokens' K/V are the ones written to it). block_tables
    must hold ceil(context_len / block_size) valid blocks per sequence; entries past that are never read.
    Not checked here: that would need a host sync. Without `max_seqlen`, one sync reads the longest run of
    new tokens for the grid.
    """
    num_tokens, num_heads, head_dim = query.shape
    num_kv_heads = k_cache.shape[-2]
    num_seqs = cu_seqlens.numel() - 1
    check_cache_pair(k_cache, v_cache, (4,))
    if key.dtype != k_cache.dtype or value.dtype != k_cache.dtype:
        raise ValueError(f"key {key.dtype} and value {value.dtype} must have the cache's dtype {k_cache.dtype}")
    _check_new_tokens(query, key, value, num_kv_heads, cu_seqlens)
    if k_cache.shape[-1] != head_dim:
        raise ValueError(f"cache head_dim {k_cache.shape[-1]} != query head_dim {head_dim}")
    check_int("context_lens", context_lens, (torch.int32,))
    check_contiguous("context_lens", context_lens)
    if cu_seqlens.shape != (num_seqs + 1,) or context_lens.shape != (num_seqs,):
        raise ValueError(f"cu_seqlens must be [num_seqs + 1] and context_lens [num_seqs], "
                         f"got {tuple(cu_seqlens.shape)} and {tuple(context_lens.shape)}")
    check_int("block_tables", block_tables, (torch.int32,))
    if block_tables.dim() != 2 or block_tables.shape[0] != num_seqs or block_tables.stride(1) != 1:
        raise ValueError(f"block_tables must be [num_seqs={num_seqs}, max_blocks] with stride 1 along blocks, "
                         f"got shape {tuple(block_tables.shape)} strides {block_tables.stride()}")
    block_size = k_cache.shape[1]
    if block_size & (block_size - 1):
        raise ValueError(f"block_size must be a power of two, got {block_size}")
    check_device(_prefix_prefill_kernel, query, key, value, k_cache, v_cache, block_tables, context_lens,
                 cu_seqlens)
    return _launch(query, key, value, k_cache, v_cache, block_tables, context_lens, cu_seqlens, scale, max_seqlen,
                   has_context=True)
