"""Swap-out and swap-in latency against block size on the present device, beside recomputation (Figure 19a).

    python -m pagedbench.studies.swap_bench --out DIR [--model tiny] [--tokens 1024]   # DIR/swap_bench.{csv,json}
    python -m pagedbench.studies.swap_bench --model opt-1.3b --tokens 2048 --plan h200 # its memory; nothing runs

For each block size, `tokens` token slots' K and V (every layer) move from
the device cache to the host pool and back, as the engine swaps them: one
copy per block, per layer, for K and for V (`pagedbench.engines.real.swap`). On cuda the
host pool is pinned memory. Recomputation is the prefill of the same tokens
through the real model (its cost does not depend on the block size). Two
more rows swap four times the tokens (blocks of 16 and 256), so the fit
below can tell the per-transfer cost from the bandwidth. Each
figure is the median of `repeats` timed runs after one warm-up.

The JSON also holds a least-squares fit of the swap times to the sim's
transfer model (a fixed cost per transfer plus bytes over a link bandwidth,
`engines/sim/transfer.py`): the numbers a hardware preset's
`host_transfer_latency_s` and `host_link_bandwidth` take for this device.

Memory (`studies/memory_plan.py`): the recompute's model and KV cache are
freed before the swap rows; each row's device blocks and host pool are
allocated only if they fit FREE_FRACTION of the device and host memory free
then (else the row is skipped, saying so), and freed before the next. Each
row is appended to swap_bench.rows.csv as soon as it is measured.
"""
from __future__ import annotations

import argparse
import csv
import gc
import io
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from pagedbench.engines.batch import Batch
from pagedbench.engines.config import PagedEngineConfig, SchedulerLimits
from pagedbench.engines.real.build import RealBackendConfig, available_bytes, build_real, load_real_model
from pagedbench.engines.real.kv_cache import bytes_per_slot
from pagedbench.engines.real.model import resolve_device, resolve_dtype
from pagedbench.engines.real.swap import allocate_host_blocks, swap_blocks
from pagedbench.engines.sequence import Sequence
from pagedbench.engines.sim.swap_cost import BLOCK_SIZES   # Figure 19a's block sizes, as the sim tabulates them
from pagedbench.engines.specs.model import ModelSpec
from pagedbench.engines.specs.presets import load_model
from pagedbench.studies.memory_plan import (FREE_FRACTION, StepPlan, activation_bytes, device_memory, dtype_bytes, gib,
                                 host_available_bytes, kv_bytes_per_slot, report, weight_bytes)
from pagedbench.studies.row_log import RowLog
from pagedbench.workloads.request import Request

RECOMPUTE_SPARE_SLOTS = 32   # the recompute's KV cache: its tokens and this many more


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _free_cache(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _median_s(fn, device: torch.device, repeats: int) -> float:
    fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def row_plan(tokens: int, block_sizes) -> list[tuple[int, int]]:
    """(tokens, block size) of each row: `tokens` at every block size, then four times the tokens at a few
    block sizes (the fit needs bytes that vary apart from transfers)."""
    return [(tokens, b) for b in block_sizes] + [(4 * tokens, b) for b in (16, 256) if b in block_sizes]


def block_bytes(spec: ModelSpec, element_bytes: int, tokens: int, block_size: int) -> tuple[int, int]:
    """(bytes of a row's blocks, all layers' K and V: on the device, and again in the host pool;
    the largest transient while they are filled: one layer's K drawn in fp32)."""
    slots = -(-tokens // block_size) * block_size
    layer_fp32 = slots * spec.num_kv_heads * spec.head_dim * 4
    return slots * kv_bytes_per_slot(spec, element_bytes), layer_fp32


def recompute_bytes(spec: ModelSpec, element_bytes: int, tokens: int) -> tuple[int, int]:
    """(KV cache, activations) of the recompute's prefill of `tokens` tokens."""
    kv = (tokens + RECOMPUTE_SPARE_SLOTS) * kv_bytes_per_slot(spec, element_bytes)
    return kv, activation_bytes(spec, element_bytes, tokens=tokens, rows=1, longest_prefill=tokens)


def plan(model: str, tokens: int, device: str, block_sizes=BLOCK_SIZES) -> StepPlan:
    """The bench's planned device memory on a named GPU (float16, as on a GPU), from the model preset alone."""
    spec, nbytes = load_model(model), dtype_bytes("float16")
    kv, activations = recompute_bytes(spec, nbytes, tokens)
    blocks, transient = max(block_bytes(spec, nbytes, n, bs) for n, bs in row_plan(tokens, block_sizes))
    return StepPlan("swap_bench", device_memory(device), (
        ("weights", weight_bytes(spec, nbytes)), ("KV", kv), ("activations", activations),
        ("device blocks", blocks + transient)),
        note=f"pinned host {gib(blocks)} GiB; the recompute's weights, KV and activations are freed before the blocks")


def recompute_setup(backend: RealBackendConfig, spec, loaded, tokens: int):
    """A paged engine over the loaded model with room for one `tokens`-token prompt, that prompt admitted, and
    the batch that prefills it: (setup, sequence, batch). Executing the batch is one recomputation."""
    backend.kv_budget_mib = (tokens + RECOMPUTE_SPARE_SLOTS) * loaded.bytes_per_slot / 2**20
    limits = SchedulerLimits(max_seq_len=spec.max_seq_len, max_num_batched_tokens=max(tokens, spec.max_seq_len))
    setup = build_real(backend, spec, PagedEngineConfig(block_size=16, watermark=0.0, swap_space=0),
                       limits, loaded=loaded)
    seq = Sequence(Request(0, 0.0, tuple(range(1, tokens + 1)), output_len=2))
    setup.scheduler.kv.try_admit(seq)
    return setup, seq, Batch(prefill=[seq], prefill_lens=[tokens])


def recompute_s(model_name: str, tokens: int, device: torch.device, dtype: torch.dtype, repeats: int) -> float:
    """Seconds of one prefill of `tokens` tokens through the real model: what recomputation costs."""
    spec = load_model(model_name)
    backend = RealBackendConfig(device=str(device), dtype=str(dtype).removeprefix("torch."))
    loaded = load_real_model(backend, spec)
    kv, activations = recompute_bytes(spec, dtype.itemsize, tokens)
    free = available_bytes(device) if device.type == "cuda" else host_available_bytes()
    if kv + activations > FREE_FRACTION * free:
        raise ValueError(f"the recompute of {tokens} tokens needs {gib(kv)} GiB of KV cache and {gib(activations)} "
                         f"GiB of activations but {device} has {gib(free)} GiB free after loading {spec.name} "
                         f"(a study fills {FREE_FRACTION:.0%} of it); pass fewer --tokens")
    setup, seq, batch = recompute_setup(backend, spec, loaded, tokens)

    def run() -> None:
        setup.executor.execute(batch)
        seq.output_token_ids.clear()
    return _median_s(run, device, repeats)


def row_fits(dev: torch.device, nbytes: int, transient: int) -> str | None:
    """Why a row's blocks (`nbytes` on the device and again on the host) do not fit now, or None."""
    _free_cache(dev)
    host_need = nbytes if dev.type == "cuda" else 2 * nbytes + transient   # on a cpu both sides are host memory
    if dev.type == "cuda" and nbytes + transient > FREE_FRACTION * available_bytes(dev):
        return (f"its device blocks ({gib(nbytes + transient)} GiB) exceed {FREE_FRACTION:.0%} of the device's "
                f"free memory")
    if host_need > FREE_FRACTION * host_available_bytes():
        return f"its host pool ({gib(host_need)} GiB) exceeds {FREE_FRACTION:.0%} of the host's free memory"
    return None


def measure(model_name: str = "tiny", tokens: int = 1024, repeats: int = 5, device: str = "auto",
            block_sizes=BLOCK_SIZES, rows_csv: Path | None = None) -> tuple[list[dict], dict]:
    """The rows (each appended to `rows_csv`, flushed, as it is measured) and the meta with the link fit."""
    dev = resolve_device(device)
    dtype = resolve_dtype("auto", dev)
    spec = load_model(model_name)
    per_slot = bytes_per_slot(spec.num_layers, spec.num_kv_heads, spec.head_dim, dtype)
    recompute = recompute_s(model_name, tokens, dev, dtype, repeats)
    print(f"recompute of {tokens} tokens: {1e3 * recompute:.2f} ms", file=sys.stderr, flush=True)
    rows, skipped = [], []
    with RowLog(rows_csv) as log:
        for n, bs in row_plan(tokens, block_sizes):
            blocks = -(-n // bs)
            nbytes, transient = block_bytes(spec, dtype.itemsize, n, bs)
            why = row_fits(dev, nbytes, transient)
            if why:
                skipped.append(f"{n} tokens in blocks of {bs}: {why}")
                print(f"skipped {skipped[-1]}", file=sys.stderr, flush=True)
                continue
            shape = (blocks, bs, spec.num_kv_heads, spec.head_dim)
            dev_k = [torch.randn(shape, device=dev).to(dtype) for _ in range(spec.num_layers)]
            dev_v = [torch.randn(shape, device=dev).to(dtype) for _ in range(spec.num_layers)]
            host_k, host_v = allocate_host_blocks(dev_k, blocks)
            pairs = [(b, b) for b in range(blocks)]
            out_s = _median_s(lambda: swap_blocks(dev_k, dev_v, host_k, host_v, pairs), dev, repeats)
            in_s = _median_s(lambda: swap_blocks(host_k, host_v, dev_k, dev_v, pairs), dev, repeats)
            del dev_k, dev_v, host_k, host_v    # freed before the next row's are allocated
            rows.append({"block_size": bs, "tokens": n, "blocks": blocks, "transfers": 2 * spec.num_layers * blocks,
                         "bytes": blocks * bs * per_slot, "swap_out_ms": 1e3 * out_s, "swap_in_ms": 1e3 * in_s,
                         "recompute_ms": 1e3 * recompute if n == tokens else None})
            log.append(rows[-1])
            print(f"{n} tokens in blocks of {bs}: swap out {1e3 * out_s:.2f} ms, in {1e3 * in_s:.2f} ms",
                  file=sys.stderr, flush=True)
    if len(rows) < 2:
        raise ValueError(f"{len(rows)} swap row(s) fit the memory free, too few to fit the link: {'; '.join(skipped)}")
    meta = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "dtype": str(dtype),
            "model": model_name, "tokens": tokens, "repeats": repeats, "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "skipped": skipped, **fit_link(rows)}
    return rows, meta


def fit_link(rows: list[dict]) -> dict:
    """Least squares of swap time (both directions) = transfers x latency + bytes / bandwidth."""
    a = np.array([[r["transfers"], r["bytes"]] for r in rows for _ in (0, 1)], dtype=np.float64)
    t = np.array([r[k] / 1e3 for r in rows for k in ("swap_out_ms", "swap_in_ms")])
    (latency, per_byte), *_ = np.linalg.lstsq(a, t, rcond=None)
    return {"fit_host_transfer_latency_s": float(max(latency, 0.0)),
            "fit_host_link_bandwidth": float(1 / per_byte) if per_byte > 0 else None}


def to_csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.studies.swap_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for swap_bench.csv, swap_bench.json and the rows as "
                                                 "measured (swap_bench.rows.csv)")
    parser.add_argument("--model", default="tiny", help="model preset (conf/model/NAME.yaml)")
    parser.add_argument("--tokens", type=int, default=1024, help="token slots swapped each way")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--plan", metavar="HARDWARE", help="print the planned peak device memory on this GPU "
                        "(conf/hardware/NAME.yaml) and exit: 0 if it fits, 2 if not")
    args = parser.parse_args(argv)
    if args.tokens < 1 or args.repeats < 1:
        parser.error("--tokens and --repeats must be >= 1")
    if args.plan:
        return report(lambda: plan(args.model, args.tokens, args.plan))
    if args.out is None:
        parser.error("--out is required (unless --plan)")
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        rows, meta = measure(args.model, args.tokens, args.repeats, args.device,
                             rows_csv=args.out / "swap_bench.rows.csv")
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    (args.out / "swap_bench.csv").write_text(to_csv(rows))
    (args.out / "swap_bench.json").write_text(json.dumps(meta, indent=2))
    sys.stdout.write(to_csv(rows))
    print(json.dumps(meta, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
