"""Decode attention in Triton: one query token per sequence over its cached K/V.

The paged and the contiguous kernels are one kernel, `_decode_kernel`, whose only
difference is address translation (`_token_slots`, chosen by the PAGED constexpr):

- paged:      slot = block_tables[s, pos // block_size] * block_size + pos % block_size
- contiguous: slot = seq_starts[s] + pos

The context is read in tiles of TILE positions whatever the block size, so a tile
may span many small blocks (one block-table entry per position) or sit inside one
large block. The block size is a runtime shift, and the group size and head_dim are
runtime masks over power-of-two padded ranges, so few variants get compiled. A tuning
variant, `table_loads="block"`, loads each block's table entry once per tile (the block
size then a constexpr: one variant per block size) instead of once per position. A
program handles one (sequence, KV head, split) and all query heads sharing that KV
head, so GQA/MQA read each K/V row once; the group is padded to 16 rows for tl.dot.
Softmax is online, in fp32, in base 2.

Split-K (flash-decoding): with num_splits > 1 each sequence's context is cut into
num_splits tile-aligned parts; each writes its normalised partial output and its
log-sum-exp, and `_combine_splits_kernel` merges them. num_splits=0 picks a count
with `choose_num_splits` (one host sync to read the longest context).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagedbench.kernels.ops import DEFAULT_NUM_WARPS, TABLE_LOADS, num_warps_problem
from pagedbench.kernels.triton_launch import (check_cache_pair, check_contiguous, check_device, check_float, check_int,
                                   check_last_dim_dense, online_softmax_step, pow2)

LOG2E = 1.4426950408889634
MIN_GROUP_ROWS = 16          # tl.dot needs at least 16 rows
MIN_TOKENS_PER_SPLIT = 256   # splitting shorter contexts costs more in the combine than it gains
MAX_SPLITS = 16


@triton.jit
def _token_slots(pos,                # [TILE] int32 positions in the sequence: tile_start + arange(TILE)
                 valid,              # [TILE] bool, pos < end
                 tile_start,         # int32, a multiple of TILE
                 end,                # int32, one past the last position read
                 seq,                # int64 sequence index
                 block_tables_ptr,   # [num_seqs, max_blocks_per_seq] int32 (PAGED)
                 seq_starts_ptr,     # [num_seqs] int64 (not PAGED)
                 stride_table_seq,
                 block_shift,        # log2(block_size)
                 PAGED: tl.constexpr,
                 TABLE_PER_BLOCK: tl.constexpr,   # PAGED: one table load per block, not one per position
                 BLOCK_SIZE: tl.constexpr,        # TABLE_PER_BLOCK: the block size (1 otherwise: no variants)
                 TILE: tl.constexpr):
    """Flat cache slot of each position: the single difference between paged and contiguous."""
    if PAGED:
        table = block_tables_ptr + seq * stride_table_seq
        if TABLE_PER_BLOCK:
            if BLOCK_SIZE >= TILE:
                # Tiles start at multiples of TILE and blocks at multiples of BLOCK_SIZE (both powers of two), so
                # the tile lies inside one block, and its first position is valid: one scalar load.
                block = tl.load(table + tile_start // BLOCK_SIZE)
                slots = block.to(tl.int64) * BLOCK_SIZE + (pos % BLOCK_SIZE)
            else:
                # TILE // BLOCK_SIZE whole blocks: their entries in one load, each spread over its block's slots.
                index = tile_start // BLOCK_SIZE + tl.arange(0, TILE // BLOCK_SIZE)
                blocks = tl.load(table + index, mask=index * BLOCK_SIZE < end, other=0)
                slots = tl.reshape(blocks.to(tl.int64)[:, None] * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)[None, :],
                                   [TILE])
        else:
            block_index = pos >> block_shift
            block = tl.load(table + block_index, mask=valid, other=0)
            slots = (block.to(tl.int64) << block_shift) + (pos - (block_index << block_shift))
    else:
        slots = tl.load(seq_starts_ptr + seq) + pos.to(tl.int64)
    return slots


@triton.jit(do_not_specialize=["group", "block_shift", "stride_table_seq"])   # fewer compiled variants
def _decode_kernel(
    out_ptr,            # one pass: [num_seqs, num_heads, head_dim]; split: [num_seqs, num_heads, num_splits, head_dim] fp32
    lse_ptr,            # split: [num_seqs, num_heads, num_splits] fp32 log2-sum-exp of each part; unused in one pass
    query_ptr,          # [num_seqs, num_heads, head_dim]
    k_cache_ptr,        # paged [num_blocks, block_size, num_kv_heads, head_dim] or arena [num_slots, num_kv_heads, head_dim]
    v_cache_ptr,        # same shape as k_cache
    block_tables_ptr,   # [num_seqs, max_blocks_per_seq] int32 (PAGED)
    seq_starts_ptr,     # [num_seqs] int64 (not PAGED)
    context_lens_ptr,   # [num_seqs] int32, >= 1
    scale_log2,         # softmax scale * log2(e)
    group,              # query heads per KV head
    head_dim,
    block_shift,        # log2(block_size) (PAGED)
    stride_q_seq, stride_q_head,
    stride_o_seq, stride_o_head, stride_o_split,
    stride_table_seq,
    stride_cache_slot, stride_cache_head,
    GROUP_PAD: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, TILE: tl.constexpr,
    PAGED: tl.constexpr, SPLIT: tl.constexpr,
    TABLE_PER_BLOCK: tl.constexpr, BLOCK_SIZE: tl.constexpr,   # see _token_slots
    DOT_PRECISION: tl.constexpr,   # "ieee" for an fp32 cache (no tf32 rounding), else the default
):
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    num_splits = tl.num_programs(2)

    rows = tl.arange(0, GROUP_PAD)                     # query heads of this KV head
    dims = tl.arange(0, HEAD_DIM_PAD)
    row_ok = rows < group
    dim_ok = dims < head_dim
    heads = kv_head * group + rows

    q = tl.load(query_ptr + seq * stride_q_seq + heads[:, None] * stride_q_head + dims[None, :],
                mask=row_ok[:, None] & dim_ok[None, :], other=0.0)   # [GROUP_PAD, HEAD_DIM_PAD]

    context_len = tl.load(context_lens_ptr + seq)
    split_len = tl.cdiv(tl.cdiv(context_len, num_splits), TILE) * TILE
    start = split * split_len
    end = tl.minimum(start + split_len, context_len)

    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM_PAD], tl.float32)
    for tile_start in range(start, end, TILE):
        pos = tile_start + tl.arange(0, TILE)
        valid = pos < end
        slots = _token_slots(pos, valid, tile_start, end, seq, block_tables_ptr, seq_starts_ptr, stride_table_seq,
                             block_shift, PAGED, TABLE_PER_BLOCK, BLOCK_SIZE, TILE)
        kv_offsets = slots[:, None] * stride_cache_slot + kv_head * stride_cache_head + dims[None, :]
        kv_mask = valid[:, None] & dim_ok[None, :]
        k = tl.load(k_cache_ptr + kv_offsets, mask=kv_mask, other=0.0)            # [TILE, HEAD_DIM_PAD]
        scores = tl.dot(q.to(k.dtype), tl.trans(k), input_precision=DOT_PRECISION) * scale_log2   # [GROUP_PAD, TILE]
        scores = tl.where(valid[None, :], scores, float("-inf"))
        v = tl.load(v_cache_ptr + kv_offsets, mask=kv_mask, other=0.0)            # [TILE, HEAD_DIM_PAD]
        # Finite: every tile holds a valid position.
        m_i, l_i, acc = online_softmax_step(scores, v, m_i, l_i, acc, DOT_PRECISION)

    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]   # an empty split (short context) writes zeros
    out_offsets = seq * stride_o_seq + heads[:, None] * stride_o_head + split * stride_o_split + dims[None, :]
    tl.store(out_ptr + out_offsets, out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & dim_ok[None, :])
    if SPLIT:
        lse = m_i + tl.log2(tl.maximum(l_i, 1e-30))   # -inf for an empty split (m_i = -inf, l_i = 0)
        tl.store(lse_ptr + (seq * tl.num_programs(1) * group + heads) * num_splits + split, lse, mask=row_ok)


@triton.jit
def _combine_splits_kernel(
    out_ptr,        # [num_seqs, num_heads, head_dim]
    part_out_ptr,   # [num_seqs, num_heads, num_splits, head_dim] fp32
    part_lse_ptr,   # [num_seqs, num_heads, num_splits] fp32
    num_splits,
    head_dim,
    stride_o_seq, stride_o_head,
    HEAD_DIM_PAD: tl.constexpr, SPLITS_PAD: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    row = seq * tl.num_programs(1) + head
    splits = tl.arange(0, SPLITS_PAD)
    dims = tl.arange(0, HEAD_DIM_PAD)
    split_ok = splits < num_splits
    lse = tl.load(part_lse_ptr + row * num_splits + splits, mask=split_ok, other=float("-inf"))
    weights = tl.exp2(lse - tl.max(lse, axis=0))      # split 0 is never empty, so the max is finite
    parts = tl.load(part_out_ptr + (row * num_splits + splits[:, None]) * head_dim + dims[None, :],
                    mask=split_ok[:, None] & (dims < head_dim)[None, :], other=0.0)
    out = tl.sum(parts * weights[:, None], axis=0) / tl.sum(weights, axis=0)
    tl.store(out_ptr + seq * stride_o_seq + head * stride_o_head + dims, out.to(out_ptr.dtype.element_ty),
             mask=dims < head_dim)


def choose_num_splits(num_seqs: int, num_kv_heads: int, max_context_len: int, num_sms: int) -> int:
    """Split only when (sequence, KV head) programs cannot fill the GPU and contexts are long."""
    programs = num_seqs * num_kv_heads
    if programs >= num_sms or max_context_len < 2 * MIN_TOKENS_PER_SPLIT:
        return 1
    by_occupancy = triton.cdiv(2 * num_sms, programs)
    by_length = max_context_len // MIN_TOKENS_PER_SPLIT
    return max(1, min(by_occupancy, by_length, MAX_SPLITS))


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 8   # the interpreter has no SMs; any small number exercises the split path


def _launch(query, k_cache, v_cache, block_tables, seq_starts, context_lens, scale, num_splits, paged,
            num_stages=None, num_warps=None, table_loads="position"):
    num_seqs, num_heads, head_dim = query.shape
    num_kv_heads = k_cache.shape[-2]
    check_float("query", query)
    check_last_dim_dense("query", query)
    check_cache_pair(k_cache, v_cache, (4,) if paged else (3,))
    check_int("context_lens", context_lens, (torch.int32,))
    check_contiguous("context_lens", context_lens)
    if k_cache.shape[-1] != head_dim:
        raise ValueError(f"cache head_dim {k_cache.shape[-1]} != query head_dim {head_dim}")
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads {num_heads} must be a multiple of num_kv_heads {num_kv_heads}")
    if context_lens.shape != (num_seqs,):
        raise ValueError(f"context_lens must have shape ({num_seqs},), got {tuple(context_lens.shape)}")
    if num_splits < 0:
        raise ValueError(f"num_splits must be >= 0 (0 = choose), got {num_splits}")
    problem = num_warps_problem(num_warps)
    if problem:
        raise ValueError(problem)
    if table_loads not in TABLE_LOADS:
        raise ValueError(f"table_loads must be one of {TABLE_LOADS}, got {table_loads!r}")
    addressing = block_tables if paged else seq_starts
    if paged:
        check_int("block_tables", block_tables, (torch.int32,))
        if block_tables.dim() != 2 or block_tables.shape[0] != num_seqs or block_tables.stride(1) != 1:
            raise ValueError(f"block_tables must be [num_seqs={num_seqs}, max_blocks] with stride 1 along blocks, "
                             f"got shape {tuple(block_tables.shape)} strides {block_tables.stride()}")
        block_size = k_cache.shape[1]
        if block_size & (block_size - 1):
            raise ValueError(f"block_size must be a power of two, got {block_size}")
    else:
        check_int("seq_starts", seq_starts, (torch.int64,))
        check_contiguous("seq_starts", seq_starts)
        if seq_starts.shape != (num_seqs,):
            raise ValueError(f"seq_starts must have shape ({num_seqs},), got {tuple(seq_starts.shape)}")
        block_size = 1
    check_device(_decode_kernel, query, k_cache, v_cache, addressing, context_lens)
    per_block = paged and table_loads == "block"
    out = torch.empty((num_seqs, num_heads, head_dim), dtype=query.dtype, device=query.device)
    if num_seqs == 0:
        return out
    if num_splits == 0:
        num_splits = choose_num_splits(num_seqs, num_kv_heads, int(context_lens.max()), _num_sms(query.device))
    group = num_heads // num_kv_heads
    head_dim_pad = pow2(head_dim)
    if num_splits == 1:
        target, lse = out, out                     # lse is unused in one pass
    else:
        target = torch.empty((num_seqs, num_heads, num_splits, head_dim), dtype=torch.float32, device=query.device)
        lse = torch.empty((num_seqs, num_heads, num_splits), dtype=torch.float32, device=query.device)
    flat_cache = k_cache.view(-1, num_kv_heads, head_dim)
    _decode_kernel[(num_seqs, num_kv_heads, num_splits)](
        target, lse, query, k_cache, v_cache,
        block_tables if paged else context_lens, seq_starts if not paged else context_lens, context_lens,
        scale * LOG2E, group, head_dim, block_size.bit_length() - 1,
        query.stride(0), query.stride(1),
        target.stride(0), target.stride(1), target.stride(2) if num_splits > 1 else 0,
        block_tables.stride(0) if paged else 0,
        flat_cache.stride(0), flat_cache.stride(1),
        GROUP_PAD=max(MIN_GROUP_ROWS, pow2(group)), HEAD_DIM_PAD=head_dim_pad,
        TILE=64 if head_dim_pad <= 128 else 32,
        PAGED=paged, SPLIT=num_splits > 1,
        TABLE_PER_BLOCK=per_block, BLOCK_SIZE=block_size if per_block else 1,
        DOT_PRECISION="ieee" if k_cache.dtype == torch.float32 else "tf32",
        num_warps=num_warps or DEFAULT_NUM_WARPS,
        # Software pipelining of the K/V loads (Triton's num_stages); None keeps Triton's default.
        **({} if num_stages is None else {"num_stages": num_stages}),
    )
    if num_splits > 1:
        _combine_splits_kernel[(num_seqs, num_heads)](
            out, target, lse, num_splits, head_dim, out.stride(0), out.stride(1),
            HEAD_DIM_PAD=head_dim_pad, SPLITS_PAD=pow2(num_splits),
        )
    return out


def paged_decode_attention(query: torch.Tensor,         # [num_seqs, num_heads, head_dim]
                           k_cache: torch.Tensor,       # [num_blocks, block_size, num_kv_heads, head_dim]
                           v_cache: torch.Tensor,       # [num_blocks, block_size, num_kv_heads, head_dim]
                           block_tables: torch.Tensor,  # [num_seqs, max_blocks_per_seq] int32
                           context_lens: torch.Tensor,  # [num_seqs] int32, >= 1
                           scale: float,
                           num_splits: int = 1,          # split-K partitions; 0 = choose_num_splits
                           num_stages: int | None = None,  # load pipelining stages; None = Triton's default
                           num_warps: int | None = None,   # warps per program; None = DEFAULT_NUM_WARPS
                           table_loads: str = "position",  # block-table loads: one per "position" or per "block"
                           ) -> torch.Tensor:            # [num_seqs, num_heads, head_dim]
    """One query token per sequence attending over its context, read through its block table.

    block_tables must hold ceil(context_len / block_size) valid blocks per sequence; entries past
    that are never read. Not checked here: that would need a host sync.
    `table_loads="block"` reads each block's table entry once per tile (one vector load of the tile's
    blocks, or one scalar where a block holds the tile) instead of once per position; it compiles one
    variant per block size. Both read the same slots, so they give the same results.
    """
    return _launch(query, k_cache, v_cache, block_tables, None, context_lens, scale, num_splits, paged=True,
                   num_stages=num_stages, num_warps=num_warps, table_loads=table_loads)


def contiguous_decode_attention(query: torch.Tensor,         # [num_seqs, num_heads, head_dim]
                                k_cache: torch.Tensor,       # [num_slots, num_kv_heads, head_dim]
                                v_cache: torch.Tensor,       # [num_slots, num_kv_heads, head_dim]
                                seq_starts: torch.Tensor,    # [num_seqs] int64: first slot of each region
                                context_lens: torch.Tensor,  # [num_seqs] int32, >= 1
                                scale: float,
                                num_splits: int = 1,          # split-K partitions; 0 = choose_num_splits
                                num_stages: int | None = None,  # load pipelining stages; None = Triton's default
                                num_warps: int | None = None,   # warps per program; None = DEFAULT_NUM_WARPS
                                ) -> torch.Tensor:            # [num_seqs, num_heads, head_dim]
    """One query token per sequence attending over its context at (start, length) in the arena."""
    return _launch(query, k_cache, v_cache, None, seq_starts, context_lens, scale, num_splits, paged=False,
                   num_stages=num_stages, num_warps=num_warps)
