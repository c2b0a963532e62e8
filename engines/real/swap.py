"""Moving KV blocks between the device cache and the host pool (swapping), as vLLM does: one copy per block,
per layer, for K and for V. On cuda the host pool is pinned memory and the copies are asynchronous on the
current stream (the iteration synchronises before its time is read); on cpu the host pool is a separate
tensor and the copies are memcpys."""
from __future__ import annotations

import torch


def swap_blocks(src_k: list[torch.Tensor], src_v: list[torch.Tensor], dst_k: list[torch.Tensor],
                dst_v: list[torch.Tensor], pairs: list[tuple[int, int]]) -> None:
    """Copy block a of every source layer to block b of the same destination layer, for each (a, b)."""
    for sk, sv, dk, dv in zip(src_k, src_v, dst_k, dst_v):
        non_blocking = sk.device.type != dk.device.type
        for a, b in pairs:
            dk[b].copy_(sk[a], non_blocking=non_blocking)
            dv[b].copy_(sv[a], non_blocking=non_blocking)


def allocate_host_blocks(like: list[torch.Tensor], num_blocks: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per layer, `num_blocks` host blocks shaped like the device cache's blocks: pinned when the cache is on
    cuda. Left uninitialised: a block is written before it is read, and untouched pages cost no memory."""
    pin = like[0].device.type == "cuda"
    shape = (num_blocks, *like[0].shape[1:])
    k = [torch.empty(shape, dtype=t.dtype, pin_memory=pin) for t in like]
    v = [torch.empty(shape, dtype=t.dtype, pin_memory=pin) for t in like]
    return k, v
