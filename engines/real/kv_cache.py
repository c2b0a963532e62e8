"""KV-cache tensors, allocated once per run from a byte budget, in the engine's layout."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(slots=True)
class KVCache:
    k: list[torch.Tensor]   # per layer: [num_blocks, block_size, kv_heads, head_dim] (paged) or [num_slots, kv_heads, head_dim]
    v: list[torch.Tensor]
    num_slots: int
    bytes_per_slot: int

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)


def bytes_per_slot(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    """K and V of one token, all layers."""
    return 2 * num_layers * num_kv_heads * head_dim * torch.finfo(dtype).bits // 8


def allocate_kv(num_layers: int, num_kv_heads: int, head_dim: int, num_slots: int, block_size: int | None,
                dtype: torch.dtype, device: torch.device) -> KVCache:
    """`block_size` set: a paged pool of num_slots // block_size blocks; None: one contiguous arena."""
    if block_size is None:
        shape = (num_slots, num_kv_heads, head_dim)
        used = num_slots
    else:
        shape = (num_slots // block_size, block_size, num_kv_heads, head_dim)
        used = shape[0] * block_size
    k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
    v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
    return KVCache(k, v, used, bytes_per_slot(num_layers, num_kv_heads, head_dim, dtype))


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
