"""KV-cache tensors, allocated once per run from a byte budget: one byte pool per layer, viewed in the engine's layout.

Every engine gets the same pools for the same budget: per layer, `num_slots` token slots of K then of V, as
bytes. The contiguous engines view each half as an arena of slots [num_slots, kv_heads, head_dim]; the paged
engine views the same bytes as blocks [num_blocks, block_size, kv_heads, head_dim] (a remainder of fewer than
block_size slots left unused). So the engines differ only in how they address the memory, never in how much
they were given.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(slots=True)
class KVCache:
    k: list[torch.Tensor]   # per layer: [num_blocks, block_size, kv_heads, head_dim] (paged) or [num_slots, kv_heads, head_dim]
    v: list[torch.Tensor]
    num_slots: int          # slots the layout addresses
    bytes_per_slot: int
    pools: list[torch.Tensor] | None = None   # per layer: the uint8 pool k and v view (None: k and v own their memory)

    @property
    def nbytes(self) -> int:
        """Bytes allocated: the pools where there are pools, else the tensors themselves."""
        if self.pools is not None:
            return sum(p.numel() for p in self.pools)
        return sum(t.numel() * t.element_size() for t in self.k + self.v)


def bytes_per_slot(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    """K and V of one token, all layers."""
    return 2 * num_layers * num_kv_heads * head_dim * torch.finfo(dtype).bits // 8


def allocate_kv(num_layers: int, num_kv_heads: int, head_dim: int, num_slots: int, block_size: int | None,
                dtype: torch.dtype, device: torch.device) -> KVCache:
    """One zeroed byte pool per layer of `num_slots` slots of K and of V, viewed as a paged pool of
    num_slots // block_size blocks (`block_size` set) or as one contiguous arena (None)."""
    used = num_slots if block_size is None else num_slots // block_size * block_size
    shape = (num_slots, num_kv_heads, head_dim) if block_size is None else (
        num_slots // block_size, block_size, num_kv_heads, head_dim)
    half = num_slots * num_kv_heads * head_dim
    pools, k, v = [], [], []
    for _ in range(num_layers):
        pool = torch.zeros(2 * half * dtype.itemsize, dtype=torch.uint8, device=device)
        typed = pool.view(dtype)                                    # [2 * half] elements: K's slots, then V's
        k.append(typed[:used * num_kv_heads * head_dim].view(shape))
        v.append(typed[half:half + used * num_kv_heads * head_dim].view(shape))
        pools.append(pool)
    return KVCache(k, v, used, bytes_per_slot(num_layers, num_kv_heads, head_dim, dtype), pools)


def kv_budget_bytes(device: torch.device, budget_mib: float | None, fraction: float, cpu_default_mib: float) -> int:
    """The KV budget in bytes: given, else a fraction of free device memory (cuda), else the cpu default."""
    if budget_mib is not None:
        if budget_mib <= 0:
            raise ValueError(f"backend.kv_budget_mib must be > 0, got {budget_mib}")
        return int(budget_mib * 2**20)
    if device.type == "cuda":
        if not 0 < fraction <= 1:
            raise ValueError(f"backend.kv_budget_fraction must be in (0, 1], got {fraction}")
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * fraction)
    return int(cpu_default_mib * 2**20)
