"""Profile the real backend's iteration time over a designed grid of batch shapes on the present device.

    python -m studies.profile --model tiny --out data/profiles/cpu_tiny.parquet
    python -m studies.profile --model opt-1.3b --dtype float16 --out OUT.parquet      # on a GPU

Each shape is one real iteration through the same executor the engines use
(the model's forward pass, attention through the KV layout, sampling):

- prefill: sequences x new tokens each;
- decode, contiguous arena: batch x context length, and a batch of mixed lengths;
- decode, paged: the same at block sizes 1 to 256.

A shape runs `--warmup` times untimed, then `--repeats` times; the table
keeps the median and the minimum (seconds), with the features the cost
model's fit reads (`studies/fit.py`): rows, tokens, prefill pairs
(sum of L * (L + 1)), decode context tokens and blocks touched. A JSON file
beside the table records the device, library versions, thread count and date.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
import datetime
import json
import platform
import statistics
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from engines.batch import Batch
from engines.config import EngineConfig, SchedulerLimits
from engines.real.build import RealBackendConfig, build_real, host_load, load_real_model
from engines.sequence import Sequence
from engines.specs.presets import load_model
from workloads.request import Request

BLOCK_SIZES = (1, 4, 16, 64, 256)


@dataclass(slots=True, frozen=True)
class Shape:
    kind: str                  # prefill | decode
    layout: str                # contiguous | paged
    block_size: int            # paged only (0 for contiguous)
    lengths: tuple[int, ...]   # prefill: new tokens per sequence; decode: context per sequence


def grid(max_len: int, quick: bool = False, seed: int = 0) -> list[Shape]:
    """The designed shapes: prefill sizes, then decode per layout, batch, context (uniform and mixed)."""
    rng = np.random.default_rng(seed)
    out = []
    seqs, news = ((1, 4), (16, 128)) if quick else ((1, 2, 4, 8), (16, 64, 256))
    for n in seqs:
        for new in news:
            if n * new <= 2048:
                out.append(Shape("prefill", "contiguous", 0, (new,) * n))
    batches, contexts = ((2, 16), (64, 512)) if quick else ((1, 4, 16, 32, 64), (64, 256, 1024))
    contexts = tuple(c for c in contexts if c < max_len)
    layouts = [("contiguous", 0)] + [("paged", bs) for bs in ((1, 16, 256) if quick else BLOCK_SIZES)]
    for layout, bs in layouts:
        for batch in batches:
            for ctx in contexts:
                out.append(Shape("decode", layout, bs, (ctx,) * batch))
        mixed = tuple(int(x) for x in rng.integers(8, min(1024, max_len - 1), size=max(batches)))
        out.append(Shape("decode", layout, bs, mixed))
    return out


def features(shape: Shape) -> dict:
    """The shape as the cost model sees it."""
    lens = shape.lengths
    prefill = shape.kind == "prefill"
    blocks = sum(-(-n // shape.block_size) for n in lens) if shape.layout == "paged" and not prefill else 0
    return {"kind": shape.kind, "layout": shape.layout, "block_size": shape.block_size, "rows": len(lens),
            "tokens": sum(lens) if prefill else len(lens),
            "prefill_pairs": sum(n * (n + 1) for n in lens) if prefill else 0,
            "decode_ctx": 0 if prefill else sum(lens), "decode_blocks": blocks,
            "max_len": max(lens)}


class Profiler:
    """One model on one device; an engine per KV layout, built through the real backend's builder on first use."""

    def __init__(self, model_name: str, device: str = "auto", dtype: str = "auto", kv_slots: int = 131_072):
        self.spec = load_model(model_name)
        self.backend = RealBackendConfig(device=device, dtype=dtype, seed=0)
        self.loaded = load_real_model(self.backend, self.spec)
        self.device, self.dtype, self.ops = self.loaded.device, self.loaded.dtype, self.loaded.ops
        self.kv_slots = kv_slots
        self._engines: dict[tuple[str, int], tuple] = {}

    def _engine(self, layout: str, block_size: int):
        key = (layout, block_size)
        if key not in self._engines:
            engine = (EngineConfig(name="paged", block_size=block_size, watermark=0.0, swap_space=0)
                      if layout == "paged" else EngineConfig(name="orca", reservation="oracle", allocator="first_fit"))
            budget = replace(self.backend, kv_budget_mib=self.kv_slots * self.loaded.bytes_per_slot / 2**20)
            setup = build_real(budget, self.spec, engine, SchedulerLimits(max_seq_len=self.spec.max_seq_len),
                               loaded=self.loaded)
            self._engines[key] = (setup.scheduler.kv, setup.executor)
        return self._engines[key]

    def time(self, shape: Shape, warmup: int, repeats: int) -> list[float]:
        kv, executor = self._engine(shape.layout, shape.block_size or 16)
        seqs = []
        for i, n in enumerate(shape.lengths):
            prompt = n if shape.kind == "prefill" else n - 1
            seq = Sequence(Request(i, 0.0, tuple(range(1, prompt + 1)), output_len=2))
            if not kv.try_admit(seq):
                raise ValueError(f"{shape}: does not fit {self.kv_slots} KV slots")
            if shape.kind == "decode":   # one generated token: the context is prompt + 1, its last token fed
                seq.generated, seq.output_token_ids = 1, [1]
            seqs.append(seq)
        batch = (Batch(prefill=seqs, prefill_lens=list(shape.lengths)) if shape.kind == "prefill"
                 else Batch(decode=seqs, decode_context_lens=list(shape.lengths)))
        times = []
        try:
            for i in range(warmup + repeats):
                t = executor.execute(batch)
                for seq in seqs:
                    seq.output_token_ids.pop()   # keep the shape: execute appends the sampled token
                if i >= warmup:
                    times.append(t)
        finally:
            for seq in seqs:
                kv.free(seq)
        return times


def environment(profiler: Profiler) -> dict:
    import transformers

    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    device = profiler.device
    return {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
            "device_type": device.type, "model": profiler.spec.name, "dtype": str(profiler.dtype).removeprefix("torch."),
            "kernels": profiler.ops.name, "torch": torch.__version__, "transformers": transformers.__version__,
            "triton": triton_version, "python": platform.python_version(), **host_load(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def profile(model: str, device: str, dtype: str, warmup: int, repeats: int, quick: bool) -> tuple[pd.DataFrame, dict]:
    profiler = Profiler(model, device, dtype)
    rows = []
    shapes = grid(profiler.spec.max_seq_len, quick)
    for i, shape in enumerate(shapes):
        times = profiler.time(shape, warmup, repeats)
        rows.append({**features(shape), "time_s": statistics.median(times), "time_min_s": min(times),
                     "repeats": repeats})
        print(f"[{i + 1}/{len(shapes)}] {shape.kind} {shape.layout}"
              f"{'' if not shape.block_size else f' bs{shape.block_size}'} x{len(shape.lengths)} "
              f"max {max(shape.lengths)}: {1e3 * rows[-1]['time_s']:.2f} ms", file=sys.stderr, flush=True)
    return pd.DataFrame(rows), environment(profiler)


def write_profile(df: pd.DataFrame, env: dict, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_parquet(out, index=False)
    out.with_suffix(".json").write_text(json.dumps(env, indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.profile", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="model preset (conf/model/NAME.yaml); random weights")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a few shapes only (tests, dry runs)")
    parser.add_argument("--out", type=Path, required=True, help="the table (.parquet); a .json beside it")
    args = parser.parse_args(argv)
    if args.out.suffix != ".parquet":
        print("error: --out must end in .parquet", file=sys.stderr)
        return 2
    if args.warmup < 0 or args.repeats < 1:
        print("error: --warmup must be >= 0 and --repeats >= 1", file=sys.stderr)
        return 2
    try:
        df, env = profile(args.model, args.device, args.dtype, args.warmup, args.repeats, args.quick)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(write_profile(df, env, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
