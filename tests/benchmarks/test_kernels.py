"""pytest-benchmark timings of the decode attention and write_kv kernels (Figure 18a's calls), each call checked.

    make bench PYTEST_ARGS="-k test_kernels"          # wall time per call; extra_info: device time, bandwidth

Every case runs once per implementation: `torch` (the references of
`kernels/reference.py`, on the present device) and `triton` (the kernels,
CUDA only: on a CPU they would run under TRITON_INTERPRET=1, orders of
magnitude slower, which checks them in `tests/kernels/` but times nothing
worth keeping). The test id names the device (`torch-cpu`, `triton-cuda`),
so a saved baseline is never compared across devices. pytest-benchmark's
figure is the wall time of one synchronised call, launch included, ROUNDS
calls after WARMUP_ROUNDS; for the Triton kernels extra_info adds the device
time by CUDA graph replay over input copies larger than L2, and bandwidth.
Each benchmarked output is checked: decode attention against dense attention
in fp32 over the same K/V, write_kv by reading its slots back.

The shapes, device timing and bandwidth helpers live in
`studies/kernel_bench.py`, whose command writes the paged/contiguous ratios
to CSV and JSON.
"""
from __future__ import annotations

import csv
import json

import pytest
import torch

from pagedbench.kernels.ops import load_ops
from pagedbench.studies.kernel_bench import (BATCHES, BLOCK_SIZES, CONTEXT_LENS, CPU_NOTE, CUDA, DEVICE, SHAPE, bandwidth,
                                  contiguous_inputs, copies, decode_calls, device_name, kv_bytes_read, main,
                                  paged_inputs, peak_gbps, time_us)
from tests.kernels.kv_cases import TOLERANCE

ROUNDS, WARMUP_ROUNDS = 50, 5   # a call: 10 us - 5 ms
IMPLS = [pytest.param("torch", id=f"torch-{DEVICE}"),
         pytest.param("triton", id=f"triton-{DEVICE}", marks=pytest.mark.skipif(
             not CUDA, reason="Triton kernels are timed on CUDA only; on a CPU they run interpreted "
                              "(TRITON_INTERPRET=1), which tests/kernels uses to check them, not to time them"))]


def _bench(benchmark, impl: str, call, nbytes: int, device_calls=None, **info):
    """Time `call` (synchronised) and return its last output. On CUDA, the Triton kernel's device time and
    bandwidth over `device_calls()` (a list: one call per copy of the inputs) go to extra_info."""
    def synced():
        out = call()
        if CUDA:
            torch.cuda.synchronize()
        return out

    if CUDA:
        torch.cuda.synchronize()
    out = benchmark.pedantic(synced, rounds=ROUNDS, warmup_rounds=WARMUP_ROUNDS, iterations=1)
    benchmark.extra_info.update(info, impl=impl, device=device_name(), bytes=nbytes)
    if not CUDA:
        benchmark.extra_info["note"] = CPU_NOTE
    elif impl == "triton" and device_calls and benchmark.enabled:
        stats = time_us(device_calls())
        benchmark.extra_info.update(stats, **bandwidth(nbytes, stats["mean_us"]))
    return out


def dense_decode(query: torch.Tensor,  # [batch, num_heads, head_dim]
                 k: torch.Tensor,      # [batch, context_len, num_kv_heads, head_dim]
                 v: torch.Tensor,      # [batch, context_len, num_kv_heads, head_dim]
                 scale: float) -> torch.Tensor:   # [batch, num_heads, head_dim], query's dtype
    """Decode attention over dense K/V in fp32: what both layouts must compute."""
    group = query.shape[1] // k.shape[2]
    kf, vf = (t.float().repeat_interleave(group, dim=2) for t in (k, v))   # [batch, context_len, num_heads, dim]
    probs = torch.softmax(torch.einsum("bhd,bthd->bht", query.float(), kf) * scale, dim=-1)
    return torch.einsum("bht,bthd->bhd", probs, vf).to(query.dtype)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("context_len", CONTEXT_LENS)
@pytest.mark.parametrize("batch", BATCHES)
def test_paged_decode(benchmark, batch, context_len, block_size, impl):
    ops = load_ops(impl)
    query, k_cache, v_cache, block_tables, context_lens, scale = args = paged_inputs(batch, context_len, block_size)
    benchmark.group = f"decode batch={batch} context={context_len} {DEVICE}"
    out = _bench(benchmark, impl, lambda: ops.paged_decode_attention(*args), kv_bytes_read(batch, context_len),
                 lambda: decode_calls("paged", batch, context_len, block_size), block_size=block_size)
    tables = block_tables.long()   # [batch, blocks_per_seq]: each sequence's blocks, in order
    k, v = (cache[tables].flatten(1, 2)[:, :context_len] for cache in (k_cache, v_cache))
    torch.testing.assert_close(out, dense_decode(query, k, v, scale), **TOLERANCE[SHAPE["dtype"]])


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("context_len", CONTEXT_LENS)
@pytest.mark.parametrize("batch", BATCHES)
def test_contiguous_decode(benchmark, batch, context_len, impl):
    ops = load_ops(impl)
    query, k_arena, v_arena, seq_starts, context_lens, scale = args = contiguous_inputs(batch, context_len)
    benchmark.group = f"decode batch={batch} context={context_len} {DEVICE}"
    out = _bench(benchmark, impl, lambda: ops.contiguous_decode_attention(*args), kv_bytes_read(batch, context_len),
                 lambda: decode_calls("contiguous", batch, context_len))
    k, v = (arena.view(batch, context_len, *arena.shape[1:]) for arena in (k_arena, v_arena))  # back to back
    torch.testing.assert_close(out, dense_decode(query, k, v, scale), **TOLERANCE[SHAPE["dtype"]])


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("num_tokens", [32, 2048] if CUDA else [32])
@pytest.mark.parametrize("block_size", [1, 16, 256] if CUDA else [16])
def test_write_kv(benchmark, num_tokens, block_size, impl):
    """Scatter num_tokens new tokens (a decode step, or a prefill) to random slots of a paged cache."""
    ops = load_ops(impl)
    heads, dim, dtype = SHAPE["num_kv_heads"], SHAPE["head_dim"], SHAPE["dtype"]
    num_blocks = 4 * -(-num_tokens // block_size)
    moved = 2 * 2 * num_tokens * heads * dim * dtype.itemsize   # K and V, each read once and written once

    def inputs() -> tuple:
        k_cache = torch.zeros(num_blocks, block_size, heads, dim, device=DEVICE, dtype=dtype)
        key, value = (torch.randn(num_tokens, heads, dim, device=DEVICE, dtype=dtype) for _ in range(2))
        slots = torch.randperm(num_blocks * block_size, device=DEVICE)[:num_tokens]
        return key, value, k_cache, torch.zeros_like(k_cache), slots

    def device_calls() -> list:
        return [lambda args=inputs(): ops.write_kv(*args) for _ in range(copies(moved))]

    key, value, k_cache, v_cache, slots = args = inputs()
    benchmark.group = f"write_kv tokens={num_tokens} block={block_size} {DEVICE}"
    _bench(benchmark, impl, lambda: ops.write_kv(*args), moved, device_calls, block_size=block_size,
           num_tokens=num_tokens)
    for cache, new in ((k_cache, key), (v_cache, value)):
        flat = cache.view(-1, heads, dim)   # [num_blocks * block_size, num_kv_heads, head_dim]
        assert torch.equal(flat[slots], new) and int((flat.abs().sum((1, 2)) > 0).sum()) <= num_tokens


def test_peak_bandwidth_is_looked_up_by_device_name():
    assert peak_gbps("NVIDIA H100 80GB HBM3") == 3350 and peak_gbps("NVIDIA H100 PCIe") == 2000
    assert peak_gbps("NVIDIA H200") == 4800 and peak_gbps("NVIDIA A100-SXM4-80GB") == 2039
    assert peak_gbps("NVIDIA L40S") == 864 and peak_gbps("NVIDIA L4") == 300
    assert peak_gbps("Some Future GPU") is None


def test_script_writes_csv_and_json(tmp_path):
    main(["--out", str(tmp_path), "--batches", "2", "--context-lens", "17", "--block-sizes", "8", "16"])
    rows = list(csv.DictReader((tmp_path / "kernel_bench.csv").open()))
    assert [int(r["block_size"]) for r in rows] == [8, 16]
    assert all(float(r["paged_over_contiguous"]) > 0 for r in rows)
    meta = json.loads((tmp_path / "kernel_bench.json").read_text())
    assert meta["device"] == device_name() and len(meta["rows"]) == 2
