"""The attention function the model calls through `transformers.AttentionInterface`.

Only attention is replaced; the rest of the forward pass is the library's
own. Each call writes the new tokens' K and V into this layer's cache at
their slots, then attends: over the new tokens (prefill), over a cached
shared prefix and the new tokens (prefill after a prefix), or over the
cache (decode), through the kernels of the iteration context.
"""
from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

from pagedbench.engines.real.context import get_context

NAME = "pagedbench"


def kv_attention(module: torch.nn.Module,
                 query: torch.Tensor,   # [1, num_heads, num_tokens, head_dim]
                 key: torch.Tensor,     # [1, num_kv_heads, num_tokens, head_dim]
                 value: torch.Tensor,   # [1, num_kv_heads, num_tokens, head_dim]
                 attention_mask,        # unused: the layout itself says what each token sees
                 scaling: float | None = None,
                 dropout: float = 0.0,
                 **kwargs) -> tuple[torch.Tensor, None]:
    ctx = get_context()
    layer = module.layer_idx
    q = query[0].transpose(0, 1)        # [num_tokens, num_heads, head_dim]
    k = key[0].transpose(0, 1)
    v = value[0].transpose(0, 1)
    scale = scaling if scaling is not None else q.shape[-1] ** -0.5
    k_cache, v_cache = ctx.k_caches[layer], ctx.v_caches[layer]
    ctx.ops.write_kv(k.contiguous(), v.contiguous(), k_cache, v_cache, ctx.slot_mapping)
    if ctx.is_prefill and ctx.context_lens is not None:
        # New tokens after a cached shared prefix: attend over it through the block table, then causally.
        out = ctx.ops.prefix_prefill_attention(q.contiguous(), k.contiguous(), v.contiguous(), k_cache, v_cache,
                                               ctx.block_tables, ctx.context_lens, ctx.cu_seqlens, scale,
                                               ctx.max_seqlen)
    elif ctx.is_prefill:
        out = ctx.ops.prefill_attention(q.contiguous(), k.contiguous(), v.contiguous(), ctx.cu_seqlens, scale,
                                        ctx.max_seqlen)
    elif ctx.paged:
        out = ctx.ops.paged_decode_attention(q.contiguous(), k_cache, v_cache, ctx.block_tables,
                                             ctx.context_lens, scale)
    else:
        out = ctx.ops.contiguous_decode_attention(q.contiguous(), k_cache, v_cache, ctx.seq_starts,
                                                  ctx.context_lens, scale)
    return out.unsqueeze(0), None       # [1, num_tokens, num_heads, head_dim]


def no_mask(*args, **kwargs) -> None:
    """No dense mask is built: the packed layout and the kernels encode causality."""
    return None


def register() -> str:
    AttentionInterface.register(NAME, kv_attention)
    AttentionMaskInterface.register(NAME, no_mask)
    return NAME
