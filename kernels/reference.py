"""Torch reference implementations of the attention and KV-cache ops.

These run on the CPU backend and are the ground truth the Triton kernels of
the same names and signatures are tested against. Layouts, per layer:

- paged cache:      [num_blocks, block_size, num_kv_heads, head_dim]
- contiguous arena: [num_slots, num_kv_heads, head_dim]

A token's slot is a flat index into the cache seen as [-1, num_kv_heads,
head_dim]: `block * block_size + offset` for paged, the arena slot for
contiguous. Query head h reads KV head h // (num_heads // num_kv_heads)
(GQA / MQA). Softmax is computed in fp32; outputs have the query's dtype.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def write_kv(key: torch.Tensor,          # [num_tokens, num_kv_heads, head_dim]
             value: torch.Tensor,        # [num_tokens, num_kv_heads, head_dim]
             k_cache: torch.Tensor,      # [num_blocks, block_size, num_kv_heads, head_dim] or [num_slots, num_kv_heads, head_dim]
             v_cache: torch.Tensor,      # same shape as k_cache
             slot_mapping: torch.Tensor  # [num_tokens] int64; a negative slot means skip
             ) -> None:
    """Store each new token's K and V at its slot (reshape_and_cache)."""
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    flat_k = k_cache.view(-1, *k_cache.shape[-2:])
    flat_v = v_cache.view(-1, *v_cache.shape[-2:])
    flat_k[slots] = key[keep].to(k_cache.dtype)
    flat_v[slots] = value[keep].to(v_cache.dtype)


def _attend_one(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, out: torch.Tensor) -> None:
    """q [H, D] for one token over k, v [L, Hkv, D]; fp32 softmax; writes out [H, D] (the query's dtype).

    A view of the caller's output is written in place and the fp32 casts are skipped where the data is fp32
    already: the per-sequence loop below runs for every row of every layer, and each op saved counts there.
    """
    num_heads, num_kv_heads, head_dim = q.shape[0], k.shape[1], q.shape[-1]
    qf = q.float().view(num_kv_heads, num_heads // num_kv_heads, head_dim)       # [Hkv, G, D]
    kf, vf = k.float().transpose(0, 1), v.float().transpose(0, 1)                 # [Hkv, L, D]
    probs = torch.softmax(torch.matmul(qf, kf.transpose(1, 2)).mul_(scale), dim=-1)   # [Hkv, G, L]
    if out.dtype == torch.float32:
        torch.matmul(probs, vf, out=out.view(num_kv_heads, -1, head_dim))
    else:
        out.copy_(torch.matmul(probs, vf).reshape(num_heads, head_dim))


def paged_decode_attention(query: torch.Tensor,         # [num_seqs, num_heads, head_dim]
                           k_cache: torch.Tensor,       # [num_blocks, block_size, num_kv_heads, head_dim]
                           v_cache: torch.Tensor,       # [num_blocks, block_size, num_kv_heads, head_dim]
                           block_tables: torch.Tensor,  # [num_seqs, max_blocks_per_seq] int32
                           context_lens: torch.Tensor,  # [num_seqs] int32, >= 1
                           scale: float,
                           num_splits: int = 1,          # split-K partitions (a Triton tuning knob; ignored here)
                           num_stages: int | None = None,  # load pipelining stages (Triton only; ignored here)
                           num_warps: int | None = None,   # warps per program (Triton only; ignored here)
                           table_loads: str = "position",  # block-table loads per position or block (ignored here)
                           ) -> torch.Tensor:            # [num_seqs, num_heads, head_dim]
    """One query token per sequence attending over its context, read through its block table."""
    block_size = k_cache.shape[1]
    out = torch.empty_like(query)
    lengths = context_lens.tolist()
    # Gather each sequence's blocks into one reused buffer: index_select copies whole blocks at memcpy
    # speed, and reusing its output saves a fresh allocation (and its page faults) per sequence. On a
    # CPU, advanced indexing (k_cache[blocks]) into new tensors made paged attention 5-6x slower than
    # the contiguous arena's views; a GPU kernel reads the blocks in place and has no such cost.
    most = -(-max(lengths, default=1) // block_size)
    k_buf = torch.empty((most, *k_cache.shape[1:]), dtype=k_cache.dtype, device=k_cache.device)
    v_buf = torch.empty_like(k_buf)
    # On this 2-core CPU the loop measured fastest of the torch formulations: each sequence's gathered blocks
    # are still in cache when its attention reads them. One gather of every row's blocks, then the loop, was
    # 1.5x slower at 23 rows; a padded batch and one masked matmul 6-10x (scripts/cpu_backend_bench.py attention).
    tables = block_tables.long()
    for s, length in enumerate(lengths):
        n = -(-length // block_size)
        blocks = tables[s, :n]
        k = torch.index_select(k_cache, 0, blocks, out=k_buf[:n]).flatten(0, 1)[:length]   # [L, Hkv, D]
        v = torch.index_select(v_cache, 0, blocks, out=v_buf[:n]).flatten(0, 1)[:length]
        _attend_one(query[s], k, v, scale, out[s])
    return out


def contiguous_decode_attention(query: torch.Tensor,         # [num_seqs, num_heads, head_dim]
                                k_cache: torch.Tensor,       # [num_slots, num_kv_heads, head_dim]
                                v_cache: torch.Tensor,       # [num_slots, num_kv_heads, head_dim]
                                seq_starts: torch.Tensor,    # [num_seqs] int64: first slot of each region
                                context_lens: torch.Tensor,  # [num_seqs] int32, >= 1
                                scale: float,
                                num_splits: int = 1,          # split-K partitions (ignored here)
                                num_stages: int | None = None,  # load pipelining stages (ignored here)
                                num_warps: int | None = None,   # warps per program (ignored here)
                                ) -> torch.Tensor:            # [num_seqs, num_heads, head_dim]
    """One query token per sequence attending over its context at (start, length) in the arena."""
    out = torch.empty_like(query)
    for s, (start, length) in enumerate(zip(seq_starts.tolist(), context_lens.tolist())):
        k = k_cache[start:start + length]                   # the region is contiguous: a view, no copy
        v = v_cache[start:start + length]
        _attend_one(query[s], k, v, scale, out[s])
    return out


def prefill_attention(query: torch.Tensor,       # [num_tokens, num_heads, head_dim]
                      key: torch.Tensor,         # [num_tokens, num_kv_heads, head_dim]
                      value: torch.Tensor,       # [num_tokens, num_kv_heads, head_dim]
                      cu_seqlens: torch.Tensor,  # [num_seqs + 1] int32: sequence s is tokens cu[s]:cu[s+1]
                      scale: float,
                      max_seqlen: int | None = None,   # the longest sequence (the Triton launcher's grid; unused here)
                      ) -> torch.Tensor:         # [num_tokens, num_heads, head_dim]
    """Causal attention of each packed sequence over its own new tokens."""
    out = torch.empty_like(query)
    group = query.shape[1] // key.shape[1]
    bounds = cu_seqlens.tolist()
    for start, end in zip(bounds[:-1], bounds[1:]):
        q = query[start:end].transpose(0, 1)                               # [H, L, D]
        k = key[start:end].transpose(0, 1).repeat_interleave(group, dim=0)
        v = value[start:end].transpose(0, 1).repeat_interleave(group, dim=0)
        o = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True, scale=scale)
        out[start:end] = o.transpose(0, 1).to(query.dtype)
    return out


def prefix_prefill_attention(query: torch.Tensor,        # [num_tokens, num_heads, head_dim] new tokens, packed
                             key: torch.Tensor,          # [num_tokens, num_kv_heads, head_dim] new tokens' K
                             value: torch.Tensor,        # [num_tokens, num_kv_heads, head_dim] new tokens' V
                             k_cache: torch.Tensor,      # [num_blocks, block_size, num_kv_heads, head_dim]
                             v_cache: torch.Tensor,      # [num_blocks, block_size, num_kv_heads, head_dim]
                             block_tables: torch.Tensor, # [num_seqs, max_blocks_per_seq] int32
                             context_lens: torch.Tensor, # [num_seqs] int32, >= 0: cached tokens before the new ones
                             cu_seqlens: torch.Tensor,   # [num_seqs + 1] int32: sequence s's new tokens are cu[s]:cu[s+1]
                             scale: float,
                             max_seqlen: int | None = None,   # the longest run of new tokens (Triton's grid; unused)
                             ) -> torch.Tensor:          # [num_tokens, num_heads, head_dim]
    """Prefill after a cached prefix: new tokens attend over the cached context, then causally over themselves.

    New token i of sequence s sits at position context_lens[s] + i. It attends over the cached positions
    0..context_lens[s]-1, read through block_tables[s], and over the new tokens 0..i of its sequence, whose
    K/V come from `key`/`value` (not from the cache). With context_lens[s] == 0 this is prefill_attention.
    """
    block_size = k_cache.shape[1]
    num_heads, num_kv_heads, head_dim = query.shape[1], key.shape[1], query.shape[2]
    group = num_heads // num_kv_heads
    out = torch.empty_like(query)
    bounds = cu_seqlens.tolist()
    for s, (start, end, cached) in enumerate(zip(bounds[:-1], bounds[1:], context_lens.tolist())):
        new = end - start
        if new == 0:
            continue
        num_blocks = -(-cached // block_size)
        blocks = block_tables[s, :num_blocks].long()
        k_ctx = torch.index_select(k_cache, 0, blocks).flatten(0, 1)[:cached]                   # [C, Hkv, D]
        v_ctx = torch.index_select(v_cache, 0, blocks).flatten(0, 1)[:cached]
        k = torch.cat([k_ctx.float(), key[start:end].float()]).transpose(0, 1)                  # [Hkv, C + N, D]
        v = torch.cat([v_ctx.float(), value[start:end].float()]).transpose(0, 1)
        q = query[start:end].float().view(new, num_kv_heads, group, head_dim).permute(1, 2, 0, 3)   # [Hkv, G, N, D]
        scores = torch.matmul(q, k.unsqueeze(1).transpose(-1, -2)) * scale                     # [Hkv, G, N, C + N]
        # New token i (position cached + i) sees every position up to its own.
        visible = torch.ones(new, cached + new, dtype=torch.bool, device=query.device).tril(cached)
        probs = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
        o = torch.matmul(probs, v.unsqueeze(1))                                                 # [Hkv, G, N, D]
        out[start:end] = o.permute(2, 0, 1, 3).reshape(new, num_heads, head_dim).to(query.dtype)
    return out


def copy_blocks(k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
                v_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
                src: torch.Tensor,      # [num_pairs] int64 source blocks
                dst: torch.Tensor,      # [num_pairs] int64 destination blocks
                ) -> None:
    """Copy whole blocks src[i] -> dst[i] (copy-on-write, swapping)."""
    k_cache[dst] = k_cache[src]
    v_cache[dst] = v_cache[src]
