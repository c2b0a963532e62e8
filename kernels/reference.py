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


def _decode_over(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                 context_lens: torch.Tensor, scale: float) -> torch.Tensor:
    """query [S, H, D]; keys/values [S, T, Hkv, D] with position t valid when t < context_lens[s]."""
    num_seqs, num_heads, head_dim = query.shape
    num_kv_heads = keys.shape[2]
    q = query.float().view(num_seqs, num_kv_heads, num_heads // num_kv_heads, head_dim)
    scores = torch.einsum("skgd,stkd->skgt", q, keys.float()) * scale
    invalid = torch.arange(keys.shape[1], device=query.device)[None, :] >= context_lens[:, None]
    scores.masked_fill_(invalid[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("skgt,stkd->skgd", probs, values.float())
    return out.reshape(num_seqs, num_heads, head_dim).to(query.dtype)


def paged_decode_attention(query: torch.Tensor,         # [num_seqs, num_heads, head_dim]
                           k_cache: torch.Tensor,       # [num_blocks, block_size, num_kv_heads, head_dim]
                           v_cache: torch.Tensor,       # [num_blocks, block_size, num_kv_heads, head_dim]
                           block_tables: torch.Tensor,  # [num_seqs, max_blocks_per_seq] int32
                           context_lens: torch.Tensor,  # [num_seqs] int32, >= 1
                           scale: float,
                           num_splits: int = 1,          # split-K partitions (a Triton tuning knob; ignored here)
                           ) -> torch.Tensor:            # [num_seqs, num_heads, head_dim]
    """One query token per sequence attending over its context, read through its block table."""
    block_size = k_cache.shape[1]
    max_len = int(context_lens.max())
    pos = torch.arange(max_len, device=query.device)
    blocks = block_tables[:, pos // block_size].long()             # [S, T]
    slots = blocks * block_size + pos % block_size
    flat_k = k_cache.view(-1, *k_cache.shape[-2:])
    flat_v = v_cache.view(-1, *v_cache.shape[-2:])
    return _decode_over(query, flat_k[slots], flat_v[slots], context_lens.long(), scale)


def contiguous_decode_attention(query: torch.Tensor,         # [num_seqs, num_heads, head_dim]
                                k_cache: torch.Tensor,       # [num_slots, num_kv_heads, head_dim]
                                v_cache: torch.Tensor,       # [num_slots, num_kv_heads, head_dim]
                                seq_starts: torch.Tensor,    # [num_seqs] int64: first slot of each region
                                context_lens: torch.Tensor,  # [num_seqs] int32, >= 1
                                scale: float,
                                num_splits: int = 1,          # split-K partitions (ignored here)
                                ) -> torch.Tensor:            # [num_seqs, num_heads, head_dim]
    """One query token per sequence attending over its context at (start, length) in the arena."""
    max_len = int(context_lens.max())
    pos = torch.arange(max_len, device=query.device)
    slots = (seq_starts.long()[:, None] + pos[None, :]).clamp_max(k_cache.shape[0] - 1)
    return _decode_over(query, k_cache[slots], v_cache[slots], context_lens.long(), scale)


def prefill_attention(query: torch.Tensor,       # [num_tokens, num_heads, head_dim]
                      key: torch.Tensor,         # [num_tokens, num_kv_heads, head_dim]
                      value: torch.Tensor,       # [num_tokens, num_kv_heads, head_dim]
                      cu_seqlens: torch.Tensor,  # [num_seqs + 1] int32: sequence s is tokens cu[s]:cu[s+1]
                      scale: float,
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


def copy_blocks(k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
                v_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
                src: torch.Tensor,      # [num_pairs] int64 source blocks
                dst: torch.Tensor,      # [num_pairs] int64 destination blocks
                ) -> None:
    """Copy whole blocks src[i] -> dst[i] (copy-on-write, swapping)."""
    k_cache[dst] = k_cache[src]
    v_cache[dst] = v_cache[src]
