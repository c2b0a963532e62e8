"""pytest-benchmark timings of the decode attention and write_kv kernels (Figure 18a's calls).

    make bench PYTEST_ARGS="-k test_kernels"          # wall time per call; extra_info: device time, bandwidth

The shapes, timing and bandwidth helpers live in `studies/kernel_bench.py`,
whose command writes the paged/contiguous ratios to CSV and JSON.
"""
from __future__ import annotations

import csv
import json

import pytest
import torch

from kernels.ops import load_ops
from studies.kernel_bench import (BATCHES, BLOCK_SIZES, CONTEXT_LENS, CPU_NOTE, CUDA, DEVICE, SHAPE, bandwidth,
                                  copies, decode_calls, device_name, kv_bytes_read, main, peak_gbps, time_us)


def _record(benchmark, calls: list, nbytes: int, **info) -> None:
    """pytest-benchmark: wall time of one synchronised call (launch included); extra_info: device time, bandwidth."""
    def synced():
        calls[0]()
        if CUDA:
            torch.cuda.synchronize()

    if CUDA:
        torch.cuda.synchronize()
    benchmark.pedantic(synced, rounds=1 if benchmark.disabled else 20, warmup_rounds=0 if benchmark.disabled else 3)
    benchmark.extra_info.update(info, device=device_name(), bytes=nbytes)
    if not CUDA:
        benchmark.extra_info["note"] = CPU_NOTE
    elif not benchmark.disabled:
        stats = time_us(calls)
        benchmark.extra_info.update(stats, **bandwidth(nbytes, stats["mean_us"]))


@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("context_len", CONTEXT_LENS)
@pytest.mark.parametrize("batch", BATCHES)
def test_paged_decode(benchmark, batch, context_len, block_size):
    benchmark.group = f"decode batch={batch} context={context_len}"
    _record(benchmark, decode_calls("paged", batch, context_len, block_size), kv_bytes_read(batch, context_len),
            impl=load_ops("auto").name, block_size=block_size)


@pytest.mark.parametrize("context_len", CONTEXT_LENS)
@pytest.mark.parametrize("batch", BATCHES)
def test_contiguous_decode(benchmark, batch, context_len):
    benchmark.group = f"decode batch={batch} context={context_len}"
    _record(benchmark, decode_calls("contiguous", batch, context_len), kv_bytes_read(batch, context_len),
            impl=load_ops("auto").name)


@pytest.mark.parametrize("num_tokens", [32, 2048] if CUDA else [32])
@pytest.mark.parametrize("block_size", [1, 16, 256] if CUDA else [16])
def test_write_kv(benchmark, num_tokens, block_size):
    """Scatter num_tokens new tokens (a decode step, or a prefill) to random slots of a paged cache."""
    ops = load_ops("auto")
    heads, dim, dtype = SHAPE["num_kv_heads"], SHAPE["head_dim"], SHAPE["dtype"]
    num_blocks = 4 * -(-num_tokens // block_size)
    moved = 2 * 2 * num_tokens * heads * dim * dtype.itemsize   # K and V, each read once and written once
    calls = []
    for _ in range(copies(moved)):
        k_cache = torch.zeros(num_blocks, block_size, heads, dim, device=DEVICE, dtype=dtype)
        key = torch.randn(num_tokens, heads, dim, device=DEVICE, dtype=dtype)
        slots = torch.randperm(num_blocks * block_size, device=DEVICE)[:num_tokens]
        args = (key, key, k_cache, torch.zeros_like(k_cache), slots)
        calls.append(lambda args=args: ops.write_kv(*args))
    _record(benchmark, calls, moved, impl=ops.name, block_size=block_size, num_tokens=num_tokens)


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


