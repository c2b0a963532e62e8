"""Profile the real backend's iteration time over a designed grid of batch shapes on the present device.

    python -m pagedbench.studies.profile --model tiny --out data/profiles/cpu_tiny.parquet
    python -m pagedbench.studies.profile --model opt-1.3b --dtype float16 --out OUT.parquet      # on a GPU
    python -m pagedbench.studies.profile --model opt-1.3b --dtype float16 --plan h200            # its memory; nothing runs

Each shape is one real iteration through the same executor the engines use
(the model's forward pass, attention through the KV layout, sampling):

- prefill: sequences x new tokens each;
- decode, contiguous arena: batch x context length, and batches of mixed lengths;
- decode, paged: the same at block sizes 1 to 256.

Decode samples batches of 1, 2, 4 and 8 at four contexts (the static and
Orca engines spend most iterations there) and 16, 32 and 64 at three.
A shape runs `--warmup` times untimed, then `--repeats` times; the table
keeps the median and the minimum (seconds), with the features the cost
model's fit reads (`studies/fit.py`): rows, tokens, prefill pairs
(sum of L * (L + 1)), decode context tokens and blocks touched. A JSON file
beside the table records the device, library versions, thread count and date.

Memory: one KV cache lives at a time, sized for the grid's largest shape (its
sequences' slots rounded up to blocks, plus a margin) within FREE_FRACTION of
the memory free once the model is loaded, less an activation estimate
(`studies/memory_plan.py`); a grid whose largest shape cannot fit is refused
before anything runs. The shapes run layout by layout, each layout's cache
freed before the next is built. Each row is appended to OUT.rows.csv as soon
as it is measured, so a run cut short keeps what it measured.
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

from pagedbench.engines.batch import Batch
from pagedbench.engines.config import ContiguousEngineConfig, PagedEngineConfig, SchedulerLimits
from pagedbench.engines.real.build import RealBackendConfig, available_bytes, build_real, host_load, load_real_model
from pagedbench.engines.sequence import Sequence
from pagedbench.engines.specs.model import ModelSpec
from pagedbench.engines.specs.presets import load_model
from pagedbench.studies.memory_plan import (FREE_FRACTION, StepPlan, activation_bytes, device_memory, dtype_bytes, gib,
                                 host_available_bytes, kv_bytes_per_slot, kv_slot_cap, report, round_up,
                                 weight_bytes)
from pagedbench.studies.row_log import RowLog
from pagedbench.workloads.request import Request

BLOCK_SIZES = (1, 4, 16, 64, 256)
OUTPUT_LEN = 2          # each profiled sequence's request: its prompt, then this many output tokens


@dataclass(slots=True, frozen=True)
class Shape:
    kind: str                  # prefill | decode
    layout: str                # contiguous | paged
    block_size: int            # paged only (0 for contiguous)
    lengths: tuple[int, ...]   # prefill: new tokens per sequence; decode: context per sequence


def grid(max_len: int, quick: bool = False, seed: int = 0) -> list[Shape]:
    """The designed shapes, layout by layout: prefill sizes, then decode per layout, batch, context
    (uniform and mixed)."""
    rng = np.random.default_rng(seed)
    out = []
    seqs, news = ((1, 4), (16, 128)) if quick else ((1, 2, 4, 8), (16, 64, 256))
    for n in seqs:
        for new in news:
            if n * new <= 2048:
                out.append(Shape("prefill", "contiguous", 0, (new,) * n))
    if quick:
        decode, mixed_batches = [(b, c) for b in (1, 8) for c in (64, 512)], (16,)
    else:
        decode = ([(b, c) for b in (1, 2, 4, 8) for c in (64, 256, 1024, 1536)]
                  + [(b, c) for b in (16, 32, 64) for c in (64, 256, 1024)])
        mixed_batches = (8, 64)
    decode = [(b, c) for b, c in decode if c < max_len]
    layouts = [("contiguous", 0)] + [("paged", bs) for bs in ((1, 16, 256) if quick else BLOCK_SIZES)]
    for layout, bs in layouts:
        for batch, ctx in decode:
            out.append(Shape("decode", layout, bs, (ctx,) * batch))
        for batch in mixed_batches:
            mixed = tuple(int(x) for x in rng.integers(8, min(1024, max_len - 1), size=batch))
            out.append(Shape("decode", layout, bs, mixed))
    return out


def by_layout(shapes: list[Shape]) -> list[Shape]:
    """The shapes grouped by KV layout (in order of first appearance), so one cache lives at a time."""
    order: dict[tuple[str, int], int] = {}
    for shape in shapes:
        order.setdefault((shape.layout, shape.block_size), len(order))
    return sorted(shapes, key=lambda s: order[(s.layout, s.block_size)])


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


def slots_needed(shape: Shape) -> int:
    """KV slots the shape's sequences take in its layout (as `Profiler.time` admits them): a contiguous
    region of prompt + OUTPUT_LEN each; paged, the prompt's blocks and the block of the token it produces."""
    prompts = [n if shape.kind == "prefill" else n - 1 for n in shape.lengths]
    if shape.layout == "contiguous":
        return sum(p + OUTPUT_LEN for p in prompts)
    return sum((p // shape.block_size + 1) * shape.block_size for p in prompts)


def kv_slots_range(shapes: list[Shape]) -> tuple[int, int]:
    """(the slots the largest shape needs, rounded up to the largest block; that plus two such blocks of margin)."""
    largest_block = max([s.block_size for s in shapes] + [1])
    need = round_up(max(slots_needed(s) for s in shapes), largest_block)
    return need, need + 2 * largest_block


def grid_activation_bytes(spec: ModelSpec, element_bytes: int, shapes: list[Shape]) -> int:
    """The activation estimate of the grid's largest pass."""
    return activation_bytes(spec, element_bytes, tokens=max(features(s)["tokens"] for s in shapes),
                            rows=max(len(s.lengths) for s in shapes),
                            longest_prefill=max([max(s.lengths) for s in shapes if s.kind == "prefill"] + [1]))


def free_bytes(device: torch.device) -> int:
    """Memory free on `device` now: the GPU's, or the host's available memory."""
    return available_bytes(device) if device.type == "cuda" else host_available_bytes()


def plan(model: str, dtype: str, device: str, quick: bool = False) -> StepPlan:
    """The profile's planned device memory on a named device, from the model preset alone."""
    spec, nbytes = load_model(model), dtype_bytes(dtype)
    shapes = grid(spec.max_seq_len, quick)
    _, slots = kv_slots_range(shapes)
    return StepPlan("profile", device_memory(device), (
        ("weights", weight_bytes(spec, nbytes)), ("KV", slots * kv_bytes_per_slot(spec, nbytes)),
        ("activations", grid_activation_bytes(spec, nbytes, shapes))),
        note=f"{slots:,} KV slots, one layout at a time, {len(shapes)} shapes")


class Profiler:
    """One model on one device and the KV cache of one layout at a time, built through the real backend's
    builder when a shape first needs it (the previous layout's cache is freed first).

    `shapes`: the grid to be run, which sizes the cache; `kv_slots` overrides that.
    """

    def __init__(self, model_name: str, device: str = "auto", dtype: str = "auto", shapes: list[Shape] = (),
                 kv_slots: int | None = None):
        self.spec = load_model(model_name)
        self.backend = RealBackendConfig(device=device, dtype=dtype, seed=0)
        self.loaded = load_real_model(self.backend, self.spec)
        self.device, self.dtype, self.ops = self.loaded.device, self.loaded.dtype, self.loaded.ops
        self.kv_slots = kv_slots if kv_slots is not None else self._size_kv(list(shapes))
        self._layout: tuple[str, int] | None = None
        self._engine_parts: tuple | None = None     # (KV manager, executor) of self._layout

    def _size_kv(self, shapes: list[Shape]) -> int:
        """KV slots for the largest of `shapes` and a margin, within the memory free; refuse if it cannot fit."""
        if not shapes:
            raise ValueError("no shapes to size the KV cache for (pass shapes or kv_slots)")
        need, planned = kv_slots_range(shapes)
        per_slot = self.loaded.bytes_per_slot
        activations = grid_activation_bytes(self.spec, self.dtype.itemsize, shapes)
        free = free_bytes(self.device)
        largest_block = max([s.block_size for s in shapes] + [1])
        cap = kv_slot_cap(free, per_slot, activations) // largest_block * largest_block
        if cap < need:
            raise ValueError(
                f"the largest shape needs {need:,} KV slots ({gib(need * per_slot)} GiB) but {self.device} has room "
                f"for {cap:,}: {gib(free)} GiB free after loading {self.spec.name}, of which {FREE_FRACTION:.0%} "
                f"less {gib(activations)} GiB of activations; profile fewer shapes (--quick) or a smaller model")
        return min(planned, cap)

    def _drop_engine(self) -> None:
        """Free the current layout's cache: its last references go here (nothing holds it in a cycle, so no
        gc pass is needed; the tests check no cache is alive when the next is built)."""
        self._layout = self._engine_parts = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _engine(self, layout: str, block_size: int):
        if self._layout != (layout, block_size):
            self._drop_engine()
            engine = (PagedEngineConfig(block_size=block_size, watermark=0.0, swap_space=0)
                      if layout == "paged" else ContiguousEngineConfig(name="orca", reservation="oracle", allocator="first_fit"))
            budget = replace(self.backend, kv_budget_mib=self.kv_slots * self.loaded.bytes_per_slot / 2**20)
            setup = build_real(budget, self.spec, engine, SchedulerLimits(max_seq_len=self.spec.max_seq_len),
                               loaded=self.loaded)
            self._layout, self._engine_parts = (layout, block_size), (setup.scheduler.kv, setup.executor)
        return self._engine_parts

    def time(self, shape: Shape, warmup: int, repeats: int) -> list[float]:
        kv, executor = self._engine(shape.layout, shape.block_size)
        seqs = []
        for i, n in enumerate(shape.lengths):
            prompt = n if shape.kind == "prefill" else n - 1
            seq = Sequence(Request(i, 0.0, tuple(range(1, prompt + 1)), output_len=OUTPUT_LEN))
            if not kv.try_admit(seq):
                for admitted in seqs:
                    kv.free(admitted)
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
            "kernels": profiler.ops.name, "kv_slots": profiler.kv_slots, "torch": torch.__version__,
            "transformers": transformers.__version__, "triton": triton_version, "python": platform.python_version(),
            **host_load(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def rows_path(out: Path) -> Path:
    """Where the rows go as they are measured: OUT.rows.csv beside OUT.parquet."""
    return out.with_suffix(".rows.csv")


def profile(model: str, device: str, dtype: str, warmup: int, repeats: int, quick: bool,
            rows_csv: Path) -> tuple[pd.DataFrame, dict]:
    """Time every shape of the grid, appending each row to `rows_csv` (flushed) as it is measured."""
    shapes = by_layout(grid(load_model(model).max_seq_len, quick))
    profiler = Profiler(model, device, dtype, shapes)
    print(f"KV cache: {profiler.kv_slots:,} slots ({gib(profiler.kv_slots * profiler.loaded.bytes_per_slot)} GiB), "
          f"one layout at a time; rows as measured: {rows_csv}", file=sys.stderr, flush=True)
    rows = []
    with RowLog(rows_csv) as log:
        for i, shape in enumerate(shapes):
            times = profiler.time(shape, warmup, repeats)
            rows.append({**features(shape), "time_s": statistics.median(times), "time_min_s": min(times),
                         "repeats": repeats})
            log.append(rows[-1])
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
    parser = argparse.ArgumentParser(prog="python -m pagedbench.studies.profile", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="model preset (conf/model/NAME.yaml); random weights")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a few shapes only (tests, dry runs)")
    parser.add_argument("--out", type=Path, help="the table (.parquet); a .json and the rows as measured "
                                                 "(.rows.csv) beside it")
    parser.add_argument("--plan", metavar="HARDWARE", help="print the planned peak device memory on this hardware "
                        "preset (conf/hardware/NAME.yaml) and exit: 0 if it fits, 2 if not; loads nothing")
    args = parser.parse_args(argv)
    if args.plan:
        return report(lambda: plan(args.model, args.dtype, args.plan, args.quick))
    if args.out is None or args.out.suffix != ".parquet":
        print("error: --out must be given and end in .parquet", file=sys.stderr)
        return 2
    if args.warmup < 0 or args.repeats < 1:
        print("error: --warmup must be >= 0 and --repeats >= 1", file=sys.stderr)
        return 2
    try:
        df, env = profile(args.model, args.device, args.dtype, args.warmup, args.repeats, args.quick,
                          rows_path(args.out))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(write_profile(df, env, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
