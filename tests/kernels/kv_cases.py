"""Test inputs for the kernel tests: random caches, block tables, arenas, and covering grids of cases."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch

TOLERANCE = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.float16: dict(atol=2e-3, rtol=2e-3),
             torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2)}


def covering(strength: int, **axes: list) -> list[dict]:
    """A small set of cases holding every combination of values of any `strength` axes (greedy, deterministic).

    strength=2 is the classic pairwise grid; 3 catches bugs that need three settings at once.
    """
    names = list(axes)
    grid = np.array(list(itertools.product(*(range(len(v)) for v in axes.values()))))   # [candidates, axes]
    key_ids, offset = [], 0     # each (axes subset, values) combination gets one integer id
    for subset in itertools.combinations(range(len(names)), strength):
        sizes = [len(axes[names[a]]) for a in subset]
        key_ids.append(offset + np.ravel_multi_index(grid[:, subset].T, sizes))
        offset += math.prod(sizes)
    key_ids = np.stack(key_ids, axis=1)                                                    # [candidates, subsets]
    uncovered = np.ones(offset, dtype=bool)
    cases = []
    while uncovered.any():
        best = int(uncovered[key_ids].sum(axis=1).argmax())
        uncovered[key_ids[best]] = False
        cases.append({n: axes[n][i] for n, i in zip(names, grid[best])})
    return cases


def case_id(case: dict) -> str:
    """e.g. block_size16-heads4x2-head_dim80-longest17-batch3-dtypefloat16-num_splits3"""
    def show(v):
        return "x".join(map(str, v)) if isinstance(v, tuple) else str(v).replace("torch.", "")
    return "-".join(f"{k}{show(v)}" for k, v in case.items())


def context_lengths(batch: int, longest: int) -> list[int]:
    """The longest first, then shorter ones: 17 -> 17, 10, 4; 1025 -> 1025, 682, 340."""
    return [longest] + [max(1, longest * (batch - i) // batch - 1) for i in range(1, batch)]


@dataclass
class DecodeInputs:
    query: torch.Tensor          # [num_seqs, num_heads, head_dim]
    keys: list[torch.Tensor]     # per sequence [context_len, num_kv_heads, head_dim]
    values: list[torch.Tensor]
    context_lens: torch.Tensor   # [num_seqs] int32

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.query.shape[-1])


def decode_inputs(batch, longest, num_heads, num_kv_heads, head_dim, dtype, device) -> DecodeInputs:
    lens = context_lengths(batch, longest)
    query = torch.randn(batch, num_heads, head_dim).to(dtype=dtype, device=device)
    keys = [torch.randn(n, num_kv_heads, head_dim).to(dtype=dtype, device=device) for n in lens]
    values = [torch.randn(n, num_kv_heads, head_dim).to(dtype=dtype, device=device) for n in lens]
    return DecodeInputs(query, keys, values, torch.tensor(lens, dtype=torch.int32, device=device))


def paged_cache(inputs: DecodeInputs, block_size: int, spare_blocks: int = 3):
    """K/V scattered over randomly ordered blocks of a garbage-filled cache; block tables padded with -1."""
    needed = [math.ceil(len(k) / block_size) for k in inputs.keys]
    num_blocks = sum(needed) + spare_blocks
    num_kv_heads, head_dim = inputs.keys[0].shape[1:]
    like = dict(dtype=inputs.query.dtype, device=inputs.query.device)
    k_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim).to(**like)
    v_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim).to(**like)
    order = torch.randperm(num_blocks).tolist()
    block_tables = torch.full((len(needed), max(needed)), -1, dtype=torch.int32)
    for s, (n, k, v) in enumerate(zip(needed, inputs.keys, inputs.values)):
        blocks = [order.pop() for _ in range(n)]
        block_tables[s, :n] = torch.tensor(blocks, dtype=torch.int32)
        slots = paged_slots(blocks, block_size, len(k))
        k_cache.view(-1, num_kv_heads, head_dim)[slots] = k
        v_cache.view(-1, num_kv_heads, head_dim)[slots] = v
    return k_cache, v_cache, block_tables.to(inputs.query.device)


def paged_slots(blocks: list[int], block_size: int, length: int) -> torch.Tensor:
    pos = torch.arange(length)
    return torch.tensor(blocks, dtype=torch.int64)[pos // block_size] * block_size + pos % block_size


def arena_cache(inputs: DecodeInputs, gap: int = 5):
    """K/V of each sequence at its own region of a garbage-filled arena, regions `gap` slots apart."""
    lens = [len(k) for k in inputs.keys]
    starts = [gap + sum(lens[:i]) + gap * i for i in range(len(lens))]
    num_kv_heads, head_dim = inputs.keys[0].shape[1:]
    like = dict(dtype=inputs.query.dtype, device=inputs.query.device)
    k_cache = torch.randn(starts[-1] + lens[-1] + gap, num_kv_heads, head_dim).to(**like)
    v_cache = torch.randn_like(k_cache)
    for start, k, v in zip(starts, inputs.keys, inputs.values):
        k_cache[start:start + len(k)] = k
        v_cache[start:start + len(v)] = v
    return k_cache, v_cache, torch.tensor(starts, dtype=torch.int64, device=inputs.query.device)
