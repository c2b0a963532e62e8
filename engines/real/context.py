"""The per-iteration metadata the attention function reads: where each token's K and V live."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(slots=True)
class IterationContext:
    """Set before each forward pass, read by every layer's attention call.

    Prefill: `cu_seqlens` splits the packed tokens into sequences; attention
    runs over each sequence's own new tokens, and, when `context_lens` is
    set, first over that many cached tokens read through `block_tables`. Decode: one token per row;
    each row attends over `context_lens` tokens read from the cache through
    `block_tables` (paged) or from `seq_starts` (contiguous arena).
    """

    k_caches: list[torch.Tensor]          # per layer: [num_blocks, block_size, kv_heads, head_dim] or [num_slots, kv_heads, head_dim]
    v_caches: list[torch.Tensor]
    ops: object                           # a pagedbench.kernels.ops.KernelOps
    paged: bool
    is_prefill: bool
    slot_mapping: torch.Tensor            # [num_tokens] int64, -1 = do not store
    cu_seqlens: torch.Tensor | None = None     # [num_seqs + 1] int32 (prefill)
    max_seqlen: int | None = None              # the longest run of new tokens (prefill; spares a kernel a sync)
    context_lens: torch.Tensor | None = None   # [num_rows] int32 (decode); cached tokens per sequence (prefix prefill)
    block_tables: torch.Tensor | None = None   # [num_rows, max_blocks] int32 (paged decode, prefix prefill)
    seq_starts: torch.Tensor | None = None     # [num_rows] int64 (contiguous decode)


_current: IterationContext | None = None


def set_context(ctx: IterationContext | None) -> None:
    global _current
    _current = ctx


def get_context() -> IterationContext:
    if _current is None:
        raise RuntimeError("attention called outside an iteration: no IterationContext is set")
    return _current
