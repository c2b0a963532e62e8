"""Decode attention latency, paged vs contiguous KV cache (the paper's Figure 18a), and write_kv.

    python -m pagedbench.studies.kernel_bench --out DIR  # DIR/kernel_bench.{csv,json}: paged/contiguous ratios
    python -m pagedbench.studies.kernel_bench --out DIR --num-stages 0 2 3 4     # the pipelining knob (0: default)
    python -m pagedbench.studies.kernel_bench --out DIR --num-warps 0 2 8 --table-loads position block
                                                         # warps per program (0: default); paged block-table loads
    python -m pagedbench.studies.kernel_bench --out DIR --flex --batches 32 --context-lens 1024 4096 --block-sizes 16

Beside each paged/contiguous pair it times torch's own SDPA on the same
contiguous K/V (a dense [batch, heads, context, dim] layout: its flash or
memory-efficient backend), as an outside reference for speed (with `--flex`
also torch's flex_attention on the paged inputs: studies/flex_paged.py), and it
measures two ceilings to set achieved bandwidth against: a read-only stream
(a sum over one large buffer: bytes read / time), the ceiling of a decode
kernel, which only reads K and V; and a copy (bytes read + written / time),
kept for the records made before the stream was measured. Each kernel's share
of the datasheet peak is reported beside them (PEAK_GBPS).

On a CUDA device these time the Triton kernels by replaying a CUDA graph (no launch
overhead) that rotates through copies of the inputs larger than L2 together (K/V come
from HBM), and report achieved bandwidth = bytes of K/V read / time, and its fraction
of the device's peak where the device is in PEAK_GBPS. pytest-benchmark's own numbers
are wall time of one synchronised call, launch included. On the CPU they time the torch
references at small sizes: not a kernel measurement, only a check that the harness runs.
Layer shape on CUDA: OPT-13B (40 heads of 128, fp16), all sequences of one length.

Memory: the copies of one (batch, context)'s inputs are capped to FREE_FRACTION of the memory free
after the copy ceiling's buffers are freed, less a workspace and room for one transient copy
(`studies/memory_plan.py`); a case where even one copy does not fit is skipped, and a case with fewer
copies than wanted is noted (its K/V may come partly from L2). `--plan HARDWARE` prints the planned
peak on that device for the GPU's layer shape and the arguments given, and exits (2 if it does not
fit). Each row is appended to kernel_bench.rows.csv as soon as it is measured.
"""
from __future__ import annotations

import argparse
import csv
import gc
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from pagedbench.kernels.ops import TABLE_LOADS, load_ops, num_warps_problem
from pagedbench.studies.flex_paged import flex_paged_decode_attention, paged_block_mask
from pagedbench.studies.row_log import RowLog
from pagedbench.studies.memory_plan import (FREE_FRACTION, WORKSPACE_BYTES, StepPlan, device_memory, gib, host_available_bytes,
                                 report)

CUDA = torch.cuda.is_available()
CPU_NOTE = "torch reference on CPU: not a kernel measurement"
# (substring of torch.cuda.get_device_name(), peak HBM bandwidth GB/s); the first match wins
PEAK_GBPS = [("H200", 4800), ("H100 NVL", 3900), ("H100 PCIe", 2000), ("H100", 3350),
             ("A100-SXM4-80GB", 2039), ("A100 80GB PCIe", 1935), ("A100", 1555),
             ("L40S", 864), ("L4", 300), ("A10G", 600), ("RTX 4090", 1008), ("V100", 900)]

DEVICE = "cuda" if CUDA else "cpu"
L2_BYTES = 64 << 20   # at least the L2 of an A100 / H100 / H200 (40-50 MiB)
MAX_COPIES = 64
CEILING_BYTES = 2 << 30   # the copy ceiling's source (and its destination): 2 GiB each
GPU_SHAPE = dict(num_heads=40, num_kv_heads=40, head_dim=128, dtype=torch.float16)
GPU_GRID = dict(block_sizes=[8, 16, 32, 64, 128, 256], context_lens=[64, 128, 256, 1024, 4096], batches=[8, 32])
CPU_SHAPE = dict(num_heads=4, num_kv_heads=4, head_dim=64, dtype=torch.float32)
CPU_GRID = dict(block_sizes=[8, 16, 256], context_lens=[64, 256], batches=[8])
SHAPE = GPU_SHAPE if CUDA else CPU_SHAPE
GRID = GPU_GRID if CUDA else CPU_GRID
BLOCK_SIZES, CONTEXT_LENS, BATCHES = GRID["block_sizes"], GRID["context_lens"], GRID["batches"]


def peak_gbps(device_name: str) -> float | None:
    return next((gbps for key, gbps in PEAK_GBPS if key in device_name), None)


def device_name() -> str:
    return torch.cuda.get_device_name() if CUDA else "cpu"


def paged_inputs(batch: int, context_len: int, block_size: int) -> tuple:
    """Arguments of paged_decode_attention: each sequence's blocks in shuffled order."""
    heads, kv_heads, dim, dtype = SHAPE["num_heads"], SHAPE["num_kv_heads"], SHAPE["head_dim"], SHAPE["dtype"]
    blocks_per_seq = -(-context_len // block_size)
    num_blocks = batch * blocks_per_seq
    k_cache = torch.randn(num_blocks, block_size, kv_heads, dim, device=DEVICE, dtype=dtype)
    block_tables = torch.randperm(num_blocks, device=DEVICE).view(batch, blocks_per_seq).int()
    context_lens = torch.full((batch,), context_len, dtype=torch.int32, device=DEVICE)
    query = torch.randn(batch, heads, dim, device=DEVICE, dtype=dtype)
    return query, k_cache, torch.randn_like(k_cache), block_tables, context_lens, dim ** -0.5


def contiguous_inputs(batch: int, context_len: int) -> tuple:
    """Arguments of contiguous_decode_attention: sequences back to back in the arena."""
    heads, kv_heads, dim, dtype = SHAPE["num_heads"], SHAPE["num_kv_heads"], SHAPE["head_dim"], SHAPE["dtype"]
    k_arena = torch.randn(batch * context_len, kv_heads, dim, device=DEVICE, dtype=dtype)
    seq_starts = torch.arange(batch, device=DEVICE, dtype=torch.int64) * context_len
    context_lens = torch.full((batch,), context_len, dtype=torch.int32, device=DEVICE)
    query = torch.randn(batch, heads, dim, device=DEVICE, dtype=dtype)
    return query, k_arena, torch.randn_like(k_arena), seq_starts, context_lens, dim ** -0.5


def kv_bytes_read(batch: int, context_len: int, shape: dict = SHAPE) -> int:
    return 2 * batch * context_len * shape["num_kv_heads"] * shape["head_dim"] * shape["dtype"].itemsize


def copies(nbytes: int, cuda: bool = CUDA) -> int:
    """How many copies of the inputs to rotate through so that together they overflow L2 (CUDA only)."""
    return min(MAX_COPIES, -(-4 * L2_BYTES // nbytes)) if cuda else 1


def input_bytes(batch: int, context_len: int, block_sizes, shape: dict = SHAPE) -> int:
    """Device bytes of one copy of the largest inputs a (batch, context) case allocates: K and V (paged:
    every sequence's blocks whole), the query, block tables and lengths, and each call's output."""
    item, kv_heads, dim = shape["dtype"].itemsize, shape["num_kv_heads"], shape["head_dim"]
    slots = max([batch * context_len] + [batch * -(-context_len // bs) * bs for bs in block_sizes])
    tables = max([batch] + [batch * -(-context_len // bs) for bs in block_sizes]) * 8   # int64 before .int()
    per_query = batch * shape["num_heads"] * dim
    return 2 * slots * kv_heads * dim * item + tables + 2 * per_query * item + 16 * batch


def case_copies(batch: int, context_len: int, block_sizes, budget: int, shape: dict = SHAPE,
                cuda: bool = CUDA) -> tuple[int, int, int]:
    """(copies wanted to overflow L2, copies that fit in `budget` bytes with room for one transient copy,
    bytes of one copy) for a (batch, context) case."""
    per_copy = input_bytes(batch, context_len, block_sizes, shape)
    want = copies(kv_bytes_read(batch, context_len, shape), cuda)
    return want, max(0, min(want, budget // per_copy - 1)), per_copy


def free_bytes() -> int:
    """Memory free on the benchmark's device now (CUDA: after emptying torch's cache)."""
    if CUDA:
        gc.collect()
        torch.cuda.empty_cache()
        return torch.cuda.mem_get_info()[0]
    return host_available_bytes()


def input_budget(free: int) -> int:
    """Bytes the inputs of one case may take with `free` bytes free."""
    return max(0, int(FREE_FRACTION * free) - WORKSPACE_BYTES)


def decode_calls(layout: str, batch: int, context_len: int, block_size: int = 16, num_splits: int = 1,
                 num_stages: int | None = None, num_copies: int | None = None, num_warps: int | None = None,
                 table_loads: str = "position") -> list:
    """One call of the decode kernel per copy of its inputs (`sdpa`: torch's attention on dense K/V; `flex`:
    torch's flex_attention on the paged inputs, studies/flex_paged.py); `num_copies` copies, or as many as
    overflow L2."""
    ops = load_ops("auto")
    calls = []
    for _ in range(num_copies or copies(kv_bytes_read(batch, context_len))):
        if layout == "paged":
            args = paged_inputs(batch, context_len, block_size)
            calls.append(lambda args=args: ops.paged_decode_attention(*args, num_splits=num_splits,
                                                                      num_stages=num_stages, num_warps=num_warps,
                                                                      table_loads=table_loads))
        elif layout == "flex":     # flex_attention over the same paged inputs, its block mask built here
            args = paged_inputs(batch, context_len, block_size)
            mask = paged_block_mask(args[3], args[4], args[1].shape[0], block_size)
            calls.append(lambda args=args, mask=mask: flex_paged_decode_attention(*args, block_mask=mask))
        elif layout == "contiguous":
            args = contiguous_inputs(batch, context_len)
            calls.append(lambda args=args: ops.contiguous_decode_attention(*args, num_splits=num_splits,
                                                                           num_stages=num_stages,
                                                                           num_warps=num_warps))
        else:
            query, k, v, _, _, scale = contiguous_inputs(batch, context_len)
            heads, kv_heads, dim = SHAPE["num_heads"], SHAPE["num_kv_heads"], SHAPE["head_dim"]
            q4 = query.view(batch, heads, 1, dim)
            k4 = k.view(batch, context_len, kv_heads, dim).transpose(1, 2)   # [batch, kv_heads, context, dim]
            v4 = v.view(batch, context_len, kv_heads, dim).transpose(1, 2)
            calls.append(lambda q4=q4, k4=k4, v4=v4, scale=scale: torch.nn.functional.scaled_dot_product_attention(
                q4, k4, v4, scale=scale, enable_gqa=kv_heads != heads))
    if CUDA:   # the inputs are drawn on the default stream; the timing runs the calls on another, which must
        torch.cuda.synchronize()   # not read a block table before it is written (an illegal address on an H200)
    return calls


def copy_ceiling_gbps(nbytes: int = CEILING_BYTES) -> float:
    """Bytes read + written per second by one large device copy (CUDA), or a 256 MiB host copy (CPU)."""
    if not CUDA:
        nbytes = 256 << 20
    nbytes = min(nbytes, input_budget(free_bytes()) // 2)
    src = torch.empty(nbytes // 2, dtype=torch.float16, device=DEVICE)
    dst = torch.empty_like(src)
    if CUDA:
        import triton.testing
        ms = triton.testing.do_bench(lambda: dst.copy_(src), return_mode="median")
    else:
        dst.copy_(src)
        start = time.perf_counter()
        dst.copy_(src)
        ms = (time.perf_counter() - start) * 1e3
    return 2 * nbytes / (ms * 1e-3) / 1e9


def read_ceiling_gbps(nbytes: int = CEILING_BYTES) -> float:
    """Bytes read per second by a sum over one large buffer of the layer's dtype (fp32 accumulation: the read
    dominates), on the device (CUDA) or over 256 MiB of host memory (CPU): what a kernel that only reads can
    reach."""
    if not CUDA:
        nbytes = 256 << 20
    nbytes = min(nbytes, input_budget(free_bytes()) // 2)
    dtype = SHAPE["dtype"]
    src = torch.ones(nbytes // dtype.itemsize, dtype=dtype, device=DEVICE)
    if CUDA:
        import triton.testing
        ms = triton.testing.do_bench(lambda: torch.sum(src, dtype=torch.float32), return_mode="median")
    else:
        torch.sum(src, dtype=torch.float32)
        start = time.perf_counter()
        torch.sum(src, dtype=torch.float32)
        ms = (time.perf_counter() - start) * 1e3
    return nbytes / (ms * 1e-3) / 1e9


def time_us(calls: list, reps: int = 5) -> dict:
    """Time per call in µs: mean, p50, p90, p99.

    CUDA: triton.testing.do_bench_cudagraph over all the calls, each on its own copy of the
    inputs, so K/V come from HBM rather than L2 and no Python launch overhead counts.
    CPU: wall time of the first call.
    """
    if CUDA:
        import triton.testing

        def run_all():
            for call in calls:
                call()
        times = [ms * 1e3 / len(calls) for ms in triton.testing.do_bench_cudagraph(run_all, return_mode="all")]
    else:
        calls[0]()
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            calls[0]()
            times.append((time.perf_counter() - start) * 1e6)
    q = statistics.quantiles(times, n=100) if len(times) > 1 else times * 99
    return dict(mean_us=statistics.fmean(times), p50_us=q[49], p90_us=q[89], p99_us=q[98])


def bandwidth(kv_bytes: int, mean_us: float) -> dict:
    gbps = kv_bytes / (mean_us * 1e-6) / 1e9
    peak = peak_gbps(device_name()) if CUDA else None
    return dict(gbps=gbps, peak_fraction=gbps / peak if peak else None)


def resolve_splits(num_splits: int, batch: int, context_len: int) -> int:
    """Choose the split count on the host (0 = the kernel's heuristic): a CUDA graph cannot sync to choose."""
    if num_splits or not CUDA:
        return num_splits
    from pagedbench.kernels.triton_decode_attention import choose_num_splits
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return choose_num_splits(batch, SHAPE["num_kv_heads"], context_len, sms)


def sweep(batches, context_lens, block_sizes, num_splits: int = 1, stages=(0,), ceiling_gbps=None,
          rows_csv: Path | None = None, skipped: list[str] | None = None, read_gbps=None,
          flex: bool = False, warps=(0,), table_loads=("position",)) -> list[dict]:
    """Paged and contiguous decode latency per (batch, context, pipelining stages, warps, block size, paged
    block-table loads), with the paged/contiguous ratio, torch SDPA's time on the same K/V, and bandwidth against
    the read-only stream (`read_gbps`), the copy ceiling and the datasheet peak. A stage or warp count of 0 is
    the kernel's default (recorded as "default").
    `flex`: flex_attention's paged decode on the same paged inputs too, per block size (its time, paged / flex,
    and its share of the read-only stream), or its error where it fails.
    Each row is appended to `rows_csv` (flushed) as it is measured; a case whose inputs do not fit the
    memory free is skipped and named in `skipped`."""
    rows = []
    flex_by_case: dict[tuple, dict] = {}   # flex has none of the kernel's knobs: timed once per (batch, context, block)
    budget = input_budget(free_bytes())
    with RowLog(rows_csv) as log:
        for batch, context_len in ((b, c) for b in batches for c in context_lens):
            want, fit, per_copy = case_copies(batch, context_len, block_sizes, budget)
            if fit < 1:
                reason = (f"batch {batch} context {context_len}: skipped, one copy of its inputs ({gib(per_copy)} "
                          f"GiB) and a transient one exceed the {gib(budget)} GiB free for inputs")
                print(reason, flush=True)
                if skipped is not None:
                    skipped.append(reason)
                continue
            if fit < want:
                print(f"batch {batch} context {context_len}: {fit} copies of its inputs fit of the {want} that "
                      f"overflow L2; K/V may come partly from L2", flush=True)
            for stage, warp in ((st, w) for st in stages for w in warps):
                num_stages, num_warps = stage or None, warp or None
                splits = resolve_splits(num_splits, batch, context_len)
                kv_bytes = kv_bytes_read(batch, context_len)
                base = time_us(decode_calls("contiguous", batch, context_len, num_splits=splits,
                                            num_stages=num_stages, num_copies=fit, num_warps=num_warps))
                base_bw = bandwidth(kv_bytes, base["mean_us"])
                sdpa = time_us(decode_calls("sdpa", batch, context_len, num_copies=fit))
                sdpa_bw = bandwidth(kv_bytes, sdpa["mean_us"])
                for block_size, loads in ((b, t) for b in block_sizes for t in table_loads):
                    t = time_us(decode_calls("paged", batch, context_len, block_size, num_splits=splits,
                                             num_stages=num_stages, num_copies=fit, num_warps=num_warps,
                                             table_loads=loads))
                    bw = bandwidth(kv_bytes, t["mean_us"])
                    rows.append(dict(
                        batch=batch, context_len=context_len, num_stages=stage or "default", block_size=block_size,
                        num_warps=warp or "default", table_loads=loads,
                        num_splits=splits, sdpa_mean_us=sdpa["mean_us"],
                        paged_over_sdpa=t["mean_us"] / sdpa["mean_us"],
                        paged_ceiling_fraction=bw["gbps"] / ceiling_gbps if ceiling_gbps else None,
                        contiguous_ceiling_fraction=base_bw["gbps"] / ceiling_gbps if ceiling_gbps else None,
                        paged_mean_us=t["mean_us"], paged_p50_us=t["p50_us"], paged_p99_us=t["p99_us"],
                        contiguous_mean_us=base["mean_us"], contiguous_p50_us=base["p50_us"],
                        paged_over_contiguous=t["mean_us"] / base["mean_us"], kv_bytes=kv_bytes,
                        paged_gbps=bw["gbps"], contiguous_gbps=base_bw["gbps"],
                        paged_peak_fraction=bw["peak_fraction"], contiguous_peak_fraction=base_bw["peak_fraction"],
                        sdpa_peak_fraction=sdpa_bw["peak_fraction"],
                        paged_read_fraction=bw["gbps"] / read_gbps if read_gbps else None,
                        contiguous_read_fraction=base_bw["gbps"] / read_gbps if read_gbps else None,
                        sdpa_read_fraction=sdpa_bw["gbps"] / read_gbps if read_gbps else None,
                        copies=fit))
                    if flex:
                        case = (batch, context_len, block_size)
                        if case not in flex_by_case:
                            flex_by_case[case] = flex_columns(batch, context_len, block_size, fit, kv_bytes, read_gbps)
                        flex_row = flex_by_case[case]
                        rows[-1].update(flex_row, paged_over_flex=t["mean_us"] / flex_row["flex_mean_us"]
                                        if flex_row["flex_mean_us"] else None)
                    log.append(rows[-1])
                    print(f"batch {batch:3d} context {context_len:5d} stages {stage or '-'} warps {warp or '-'} "
                          f"block {block_size:3d} table/{loads}: "
                          f"paged {t['mean_us']:9.1f} us, sdpa {sdpa['mean_us']:9.1f} us, "
                          f"contiguous {base['mean_us']:9.1f} us, ratio {rows[-1]['paged_over_contiguous']:.3f}, "
                          f"paged {bw['gbps']:7.1f} GB/s", flush=True)
                if CUDA:
                    torch.cuda.empty_cache()
    return rows


def flex_columns(batch: int, context_len: int, block_size: int, fit: int, kv_bytes: int,
                 read_gbps: float | None) -> dict:
    """flex_attention's time on the case's paged inputs and its share of the read-only stream (the sweep adds
    paged / flex per row); where flex fails (an old torch, a compile error), its error instead of the figures."""
    try:
        f = time_us(decode_calls("flex", batch, context_len, block_size, num_copies=fit))
    except Exception as err:    # an outside reference: its failure is recorded, the sweep goes on
        print(f"batch {batch} context {context_len} block {block_size}: flex_attention failed: {err!r}", flush=True)
        return dict(flex_mean_us=None, flex_read_fraction=None, flex_error=f"{type(err).__name__}: {err}"[:300])
    gbps = bandwidth(kv_bytes, f["mean_us"])["gbps"]
    return dict(flex_mean_us=f["mean_us"], flex_read_fraction=gbps / read_gbps if read_gbps else None,
                flex_error="")


def plan(device: str, batches, context_lens, block_sizes) -> StepPlan:
    """The sweep's planned device memory on a named GPU, for the GPU's layer shape (GPU_SHAPE)."""
    memory = device_memory(device)
    budget = input_budget(memory.free_bytes)
    largest, largest_case, skipped = 0, "", []
    for batch, context_len in ((b, c) for b in batches for c in context_lens):
        want, fit, per_copy = case_copies(batch, context_len, block_sizes, budget, GPU_SHAPE, cuda=True)
        if fit < 1:
            skipped.append(f"batch {batch} context {context_len}")
        elif (fit + 1) * per_copy > largest:   # its copies and one transient copy
            largest = (fit + 1) * per_copy
            largest_case = f"batch {batch} context {context_len}: {fit} of {want} copies of {gib(per_copy)} GiB"
    ceiling = 2 * min(CEILING_BYTES, budget // 2)   # the copy's two buffers; the stream's one is smaller
    problem = (f"the inputs of {', '.join(skipped)} do not fit the {gib(budget)} GiB free for inputs on {device}; "
               f"those cases would be skipped" if skipped else "")
    return StepPlan("kernel_bench", memory, (("inputs", largest), ("copy ceiling", ceiling),
                                             ("workspace", WORKSPACE_BYTES)),
                    note=f"largest: {largest_case}" if largest_case else "no case fits", problem=problem)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.studies.kernel_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for kernel_bench.csv, kernel_bench.json and the rows as "
                                                 "measured (kernel_bench.rows.csv)")
    parser.add_argument("--batches", type=int, nargs="+", help=f"default: {GPU_GRID['batches']} on a GPU")
    parser.add_argument("--context-lens", type=int, nargs="+", help=f"default: {GPU_GRID['context_lens']} on a GPU")
    parser.add_argument("--block-sizes", type=int, nargs="+", help=f"default: {GPU_GRID['block_sizes']} on a GPU")
    parser.add_argument("--num-splits", type=int, default=1, help="split-K partitions (1 = single pass, 0 = choose)")
    parser.add_argument("--num-stages", type=int, nargs="+", default=[0],
                        help="Triton load-pipelining stages to try (0 = Triton's default)")
    parser.add_argument("--num-warps", type=int, nargs="+", default=[0],
                        help="warps per program to try (0 = the kernel's default)")
    parser.add_argument("--table-loads", nargs="+", default=["position"], choices=TABLE_LOADS,
                        help="the paged kernel's block-table loads to try: one per position read (the default) "
                             "or one per block")
    parser.add_argument("--flex", action="store_true", help="also time torch's flex_attention on the paged inputs "
                        "(a second outside reference, compiled on a GPU: one compile per case)")
    parser.add_argument("--plan", metavar="HARDWARE", help="print the planned peak device memory on this GPU "
                        "(conf/hardware/NAME.yaml; its layer shape and default grid) and exit: 0 if it fits, 2 if not")
    args = parser.parse_args(argv)
    grid = GPU_GRID if args.plan else GRID
    batches, context_lens, block_sizes = (args.batches or grid["batches"], args.context_lens or grid["context_lens"],
                                          args.block_sizes or grid["block_sizes"])
    if args.plan:
        return report(lambda: plan(args.plan, batches, context_lens, block_sizes))
    if args.out is None:
        parser.error("--out is required (unless --plan)")
    for problem in {num_warps_problem(w) for w in args.num_warps if w} - {None}:   # before any timing
        parser.error(f"--num-warps: {problem} (0 = the kernel's default)")
    args.out.mkdir(parents=True, exist_ok=True)
    ceiling = copy_ceiling_gbps()
    print(f"copy ceiling: {ceiling:.0f} GB/s (bytes read + written by one large copy)", flush=True)
    read = read_ceiling_gbps()
    print(f"read-only stream: {read:.0f} GB/s (bytes read by a sum over one large buffer; a decode kernel's "
          f"ceiling)", flush=True)
    skipped: list[str] = []
    rows = sweep(batches, context_lens, block_sizes, args.num_splits, args.num_stages, ceiling,
                 rows_csv=args.out / "kernel_bench.rows.csv", skipped=skipped, read_gbps=read, flex=args.flex,
                 warps=args.num_warps, table_loads=args.table_loads)
    if not rows:
        print("error: no case fits the memory free; nothing measured", file=sys.stderr)
        return 2
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    _write_atomic(args.out / "kernel_bench.csv", buffer.getvalue())
    meta = dict(device=device_name(), impl=load_ops("auto").name, peak_gbps=peak_gbps(device_name()) if CUDA else None,
                copy_ceiling_gbps=ceiling, read_ceiling_gbps=read, shape={k: str(v) for k, v in SHAPE.items()}, timing=("CUDA graph replay (triton.testing.do_bench_cudagraph) over input copies larger than L2"
                        if CUDA else CPU_NOTE),
                bandwidth="bytes of K and V read / mean time", skipped=skipped, rows=rows)
    _write_atomic(args.out / "kernel_bench.json", json.dumps(meta, indent=2))
    print(f"wrote {args.out / 'kernel_bench.csv'} and kernel_bench.json ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
