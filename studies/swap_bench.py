"""Swap-out and swap-in latency against block size on the present device, beside recomputation (Figure 19a).

    python -m studies.swap_bench --out DIR [--model tiny] [--tokens 1024]   # DIR/swap_bench.{csv,json}

For each block size, `tokens` token slots' K and V (every layer) move from
the device cache to the host pool and back, as the engine swaps them: one
copy per block, per layer, for K and for V (`engines.real.swap`). On cuda the
host pool is pinned memory. Recomputation is the prefill of the same tokens
through the real model (its cost does not depend on the block size). Two
more rows swap four times the tokens (blocks of 16 and 256), so the fit
below can tell the per-transfer cost from the bandwidth. Each
figure is the median of `repeats` timed runs after one warm-up.

The JSON also holds a least-squares fit of the swap times to the sim's
transfer model (a fixed cost per transfer plus bytes over a link bandwidth,
`engines/sim/transfer.py`): the numbers a hardware preset's
`host_transfer_latency_s` and `host_link_bandwidth` take for this device.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from engines.batch import Batch
from engines.config import EngineConfig, SchedulerLimits
from engines.real.build import RealBackendConfig, build_real, load_real_model
from engines.real.kv_cache import bytes_per_slot
from engines.real.model import resolve_device, resolve_dtype
from engines.real.swap import allocate_host_blocks, swap_blocks
from engines.sequence import Sequence
from engines.specs.presets import load_model
from workloads.request import Request

from engines.sim.swap_cost import BLOCK_SIZES   # Figure 19a's block sizes, as the sim tabulates them


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


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


def recompute_s(model_name: str, tokens: int, device: torch.device, dtype: torch.dtype, repeats: int) -> float:
    """Seconds of one prefill of `tokens` tokens through the real model: what recomputation costs."""
    spec = load_model(model_name)
    backend = RealBackendConfig(device=str(device), dtype=str(dtype).removeprefix("torch."))
    loaded = load_real_model(backend, spec)
    backend.kv_budget_mib = (tokens + 32) * loaded.bytes_per_slot / 2**20
    limits = SchedulerLimits(max_seq_len=spec.max_seq_len, max_num_batched_tokens=max(tokens, spec.max_seq_len))
    setup = build_real(backend, spec, EngineConfig(name="paged", block_size=16, watermark=0.0, swap_space=0),
                       limits, loaded=loaded)
    seq = Sequence(Request(0, 0.0, tuple(range(1, tokens + 1)), output_len=2))
    setup.scheduler.kv.try_admit(seq)
    batch = Batch(prefill=[seq], prefill_lens=[tokens])

    def run() -> None:
        setup.executor.execute(batch)
        seq.output_token_ids.clear()
    return _median_s(run, device, repeats)


def measure(model_name: str = "tiny", tokens: int = 1024, repeats: int = 5, device: str = "auto",
            block_sizes=BLOCK_SIZES) -> tuple[list[dict], dict]:
    dev = resolve_device(device)
    dtype = resolve_dtype("auto", dev)
    spec = load_model(model_name)
    per_slot = bytes_per_slot(spec.num_layers, spec.num_kv_heads, spec.head_dim, dtype)
    recompute = recompute_s(model_name, tokens, dev, dtype, repeats)
    rows = []
    # Four times the tokens at a few block sizes: the fit needs bytes that vary apart from transfers.
    for n, bs in [(tokens, b) for b in block_sizes] + [(4 * tokens, b) for b in (16, 256) if b in block_sizes]:
        blocks = -(-n // bs)
        shape = (blocks, bs, spec.num_kv_heads, spec.head_dim)
        dev_k = [torch.randn(shape, device=dev).to(dtype) for _ in range(spec.num_layers)]
        dev_v = [torch.randn(shape, device=dev).to(dtype) for _ in range(spec.num_layers)]
        host_k, host_v = allocate_host_blocks(dev_k, blocks)
        pairs = [(b, b) for b in range(blocks)]
        out_s = _median_s(lambda: swap_blocks(dev_k, dev_v, host_k, host_v, pairs), dev, repeats)
        in_s = _median_s(lambda: swap_blocks(host_k, host_v, dev_k, dev_v, pairs), dev, repeats)
        rows.append({"block_size": bs, "tokens": n, "blocks": blocks, "transfers": 2 * spec.num_layers * blocks,
                     "bytes": blocks * bs * per_slot, "swap_out_ms": 1e3 * out_s, "swap_in_ms": 1e3 * in_s,
                     "recompute_ms": 1e3 * recompute if n == tokens else None})
    meta = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "dtype": str(dtype),
            "model": model_name, "tokens": tokens, "repeats": repeats, "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), **fit_link(rows)}
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m studies.swap_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for swap_bench.csv and swap_bench.json")
    parser.add_argument("--model", default="tiny", help="model preset (conf/model/NAME.yaml)")
    parser.add_argument("--tokens", type=int, default=1024, help="token slots swapped each way")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args(argv)
    if args.tokens < 1 or args.repeats < 1:
        parser.error("--tokens and --repeats must be >= 1")
    rows, meta = measure(args.model, args.tokens, args.repeats, args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "swap_bench.csv").write_text(to_csv(rows))
    (args.out / "swap_bench.json").write_text(json.dumps(meta, indent=2))
    sys.stdout.write(to_csv(rows))
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
