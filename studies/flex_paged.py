"""Paged decode attention through torch's flex_attention: an outside reference for the decode kernels' speed.

`flex_paged_decode_attention` has the signature of `paged_decode_attention` (kernels/reference.py). It runs one
flex_attention over the whole physical cache, viewed as one sequence of num_blocks * block_size slots, with every
row's query as one query position, and a block mask that lets query row b see exactly the slots of b's blocks
that hold its first context_lens[b] positions (the mask is derived from the block tables: each block's owner
row and its index in that row's table). Flex skips the mask's empty tiles; the query positions of a step share
one tile, so each tile of K and V that holds any row's context is read once for all rows.

`paged_block_mask` builds the mask; `studies/kernel_bench.py --flex` builds it once per input copy, outside the
timed call (as the block tables are), and times flex_attention alone, compiled on a GPU (eager on a CPU, where it
is only a correctness check).
"""
from __future__ import annotations

import functools

import torch


@functools.cache
def _flex():
    """torch's flex_attention: compiled on a GPU (its Triton kernel), eager elsewhere."""
    from torch.nn.attention.flex_attention import flex_attention
    return torch.compile(flex_attention, dynamic=False) if torch.cuda.is_available() else flex_attention


def paged_block_mask(block_tables: torch.Tensor, context_lens: torch.Tensor, num_blocks: int, block_size: int):
    """A flex BlockMask over [num_rows query positions, num_blocks * block_size slots]: row b sees the slots
    of its first context_lens[b] positions, through its block table."""
    from torch.nn.attention.flex_attention import create_block_mask
    device = block_tables.device
    rows, width = block_tables.shape
    if rows != context_lens.shape[0]:
        raise ValueError(f"{rows} block tables for {context_lens.shape[0]} context lengths")
    if rows and int(context_lens.max()) > width * block_size:
        raise ValueError(f"a context of {int(context_lens.max())} tokens is longer than its block table "
                         f"({width} blocks of {block_size})")
    tables = block_tables.long()
    used = torch.arange(width, device=device)[None] * block_size < context_lens.long()[:, None]
    if rows and (int(tables[used].min()) < 0 or int(tables[used].max()) >= num_blocks):
        raise IndexError(f"a block table names a block outside the cache's {num_blocks}")
    owner = torch.full((num_blocks,), -1, dtype=torch.long, device=device)    # the row a block belongs to
    index = torch.zeros(num_blocks, dtype=torch.long, device=device)          # its place in that row's table
    owner[tables[used]] = torch.arange(rows, device=device)[:, None].expand(rows, width)[used]
    index[tables[used]] = torch.arange(width, device=device)[None].expand(rows, width)[used]
    lens = context_lens.long()

    def mask_mod(batch, head, q_idx, kv_idx):
        block = kv_idx // block_size
        return (owner[block] == q_idx) & (index[block] * block_size + kv_idx % block_size < lens[q_idx])
    return create_block_mask(mask_mod, None, None, rows, num_blocks * block_size, device=device.type)


def flex_paged_decode_attention(query: torch.Tensor,         # [num_seqs, num_heads, head_dim]
                                k_cache: torch.Tensor,       # [num_blocks, block_size, num_kv_heads, head_dim]
                                v_cache: torch.Tensor,       # [num_blocks, block_size, num_kv_heads, head_dim]
                                block_tables: torch.Tensor,  # [num_seqs, max_blocks_per_seq] int32
                                context_lens: torch.Tensor,  # [num_seqs] int32, >= 1
                                scale: float,
                                block_mask=None,             # paged_block_mask(...) of these tables, if built
                                ) -> torch.Tensor:           # [num_seqs, num_heads, head_dim]
    """One query token per sequence attending over its context, read through its block table by flex_attention."""
    num_blocks, block_size, kv_heads, head_dim = k_cache.shape
    num_seqs, num_heads, _ = query.shape
    if block_mask is None:
        block_mask = paged_block_mask(block_tables, context_lens, num_blocks, block_size)
    slots = num_blocks * block_size
    q = query.transpose(0, 1)[None]                                  # [1, heads, num_seqs, dim]
    k = k_cache.view(1, slots, kv_heads, head_dim).transpose(1, 2)    # [1, kv_heads, slots, dim]
    v = v_cache.view(1, slots, kv_heads, head_dim).transpose(1, 2)
    out = _flex()(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=kv_heads != num_heads)
    return out[0].transpose(0, 1).contiguous()
