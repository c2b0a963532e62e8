"""The real executor's host time per decode step, with the model's forward replaced by a no-op.

    python scripts/host_step_bench.py                       # paged and orca_oracle, 1 / 32 / 128 rows
    python scripts/host_step_bench.py --rows 32 --engines paged --steps 200
    python scripts/host_step_bench.py --static              # the static-shape step (backend.cuda_graphs), eager here
    python scripts/host_step_bench.py --rows 32 --parts     # and where the eager step's time goes

What is timed is `RealExecutor.execute(batch)` of decode steps, whose forward returns prepared logits at once:
the Python that turns a batch into the model's inputs (token ids, positions, slot mapping, context lengths,
block tables or region starts), the attention metadata, and the tokens read back and appended. The scheduler's
own step is not timed. Every request has a 256-token prompt and never finishes during the measure, so each
step decodes exactly `rows` rows. The logits are [rows, 16]: the argmax over a real vocabulary is the model's
work, not the host's. Printed per engine and row count: min / median / max microseconds a step over `--repeat`
blocks of `--steps` steps (each block's mean), torch on one thread. `--static` times the static-shape decode
step instead (`backend.cuda_graphs=true`: persistent buffers, row buckets, the argmax into a token buffer; on a
GPU its forward is a CUDA graph, here it runs eagerly over the same buffers): the host work a GPU step pays.
`--parts` also prints the eager step's parts, µs a step (median over the blocks of each block's mean), each timed
around the executor's own method inside the step: `arrays` (`_decode_arrays`: ids, positions, slots, lengths,
tables or starts), `tensors` (the rest of `_decode_context`: the tensors and the attention context), `forward`
(the inputs, the inference-mode guard, the no-op model), `emit` (the tokens taken and appended) and `rest` (the
remainder of `execute`). Timing the parts adds a few perf_counter calls a step, so their step is a little slower
than the plain one; a part costs more here than in a tight loop, as it runs after the scheduler's Python.
"""
from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

import torch

from pagedbench.engines.build import build_scheduler
from pagedbench.engines.config import SchedulerLimits
from pagedbench.engines.engine import Engine
from pagedbench.engines.real.executor import RealExecutor
from pagedbench.engines.real.kv_cache import allocate_kv
from pagedbench.engines.registry import engine_config
from pagedbench.kernels.ops import load_ops
from pagedbench.workloads.request import Request

PROMPT = 256
VOCAB = 16


class NoOpModel:
    """Stands in for the model: the config the executor reads, and a forward that returns ready logits."""

    def __init__(self, rows: int, max_len: int):
        self.config = SimpleNamespace(vocab_size=50272, max_position_embeddings=max_len)
        self.logits = torch.zeros(1, rows, VOCAB)

    def __call__(self, input_ids, position_ids, use_cache, logits_to_keep):
        rows = input_ids.shape[1] if isinstance(logits_to_keep, int) else logits_to_keep.shape[0]
        return SimpleNamespace(logits=self.logits[:, :rows])


PARTS = ("_decode_arrays", "_decode_context", "forward", "_emit")   # the executor's methods `--parts` times


def time_methods(executor: RealExecutor, names: tuple[str, ...], spent: dict[str, float]) -> None:
    """Wrap the executor's methods `names` (on the instance: its own calls go through them) to add their time to
    spent[name]."""
    for name in names:
        method = getattr(executor, name, None)
        if method is None:
            raise RuntimeError(f"this executor has no {name}(): --parts reads the eager step of this checkout")

        def timed(*args, _method=method, _name=name, **kwargs):
            start = time.perf_counter()
            out = _method(*args, **kwargs)
            spent[_name] += time.perf_counter() - start
            return out
        setattr(executor, name, timed)


SPLIT = ("arrays", "tensors", "forward", "emit", "rest")


def part_split(seconds: list[float], parts: dict[str, list[float]]) -> dict[str, float]:
    """Each block's step split into SPLIT (the context's time less its arrays'; the step's less its parts'), then
    the median over blocks of each, in µs."""
    blocks = [dict(arrays=a, tensors=c - a, forward=f, emit=e, rest=total - c - f - e)
              for total, a, c, f, e in zip(seconds, *(parts[p] for p in PARTS))]
    return {p: 1e6 * statistics.median(b[p] for b in blocks) for p in SPLIT}


def decode_steps(engine_name: str, rows: int, steps: int, repeat: int, static: bool = False,
                 parts: dict[str, list[float]] | None = None) -> list[float]:
    """Seconds per decode step, the mean of each block of `steps`. With `parts` (eager only), each block's mean
    seconds a step in each part are appended to parts[part] (see `--parts`)."""
    config = engine_config(dict(name=engine_name, block_size=16) if engine_name == "paged" else
                           dict(name="orca", reservation="oracle"))
    output = steps * (repeat + 1) + 8          # longer than the measure: no request finishes during it
    capacity = 2 * rows * 2 ** (PROMPT + output).bit_length()   # room for the buddy allocator's power-of-2 regions
    limits = SchedulerLimits(max_num_seqs=rows, max_num_batched_tokens=PROMPT + output, max_seq_len=PROMPT + output)
    scheduler = build_scheduler(config, limits, capacity, 8)
    # One layer of one head of width 1: the no-op forward reads nothing, and the layout is what the host builds.
    cache = allocate_kv(1, 1, 1, capacity, config.block_size if config.name == "paged" else None, torch.float32,
                        torch.device("cpu"))
    # (no static-shape arguments for the eager step: the script also runs against commits that predate them)
    executor = RealExecutor(NoOpModel(max(rows, PROMPT), PROMPT + output), scheduler.kv, cache, load_ops("torch"),
                            torch.device("cpu"), **(dict(cuda_graphs=True, max_rows=rows) if static else {}))
    engine = Engine(scheduler, executor)
    for i in range(rows):
        engine.add(Request(i, 0.0, tuple(range(1, PROMPT + 1)), output), 0.0)
    while len(scheduler.running) < rows or any(s.generated == 0 for s in scheduler.running.values()):
        if engine.step(0.0) is None:
            raise RuntimeError(f"{engine_name}: {rows} requests could not all be admitted")
    means = []
    timed = ("execute",) + (PARTS if parts is not None else ())
    spent = dict.fromkeys(timed, 0.0)
    time_methods(executor, timed, spent)
    for block in range(repeat + 1):     # the first block warms up
        spent.update(dict.fromkeys(timed, 0.0))
        for _ in range(steps):
            out = engine.step(0.0)
            assert out is not None and len(out.batch.decode) == rows and not out.batch.prefill
        means.append(spent["execute"] / steps)
        if parts is not None and block:
            for name in PARTS:
                parts.setdefault(name, []).append(spent[name] / steps)
    if static and executor.graphs.steps < steps * (repeat + 1):
        raise RuntimeError("the decode steps did not take the static path")
    return means[1:]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", nargs="+", default=["paged", "orca_oracle"], choices=["paged", "orca_oracle"])
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 32, 128])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--static", action="store_true", help="time the static-shape decode step (cuda_graphs)")
    parser.add_argument("--parts", action="store_true", help="also print where the eager step's time goes")
    args = parser.parse_args(argv)
    if min(args.rows) < 1 or args.steps < 1 or args.repeat < 1:
        parser.error("--rows, --steps and --repeat must be >= 1")
    if args.parts and args.static:
        parser.error("--parts times the eager step's methods; the static-shape step has other ones")
    torch.set_num_threads(1)
    print(f"{'engine':<12} {'rows':>5} {'us/step min':>12} {'median':>8} {'max':>8}")
    split = []
    for name in args.engines:
        for rows in args.rows:
            parts: dict[str, list[float]] | None = {} if args.parts else None
            seconds = decode_steps("paged" if name == "paged" else "orca", rows, args.steps, args.repeat, args.static,
                                   parts)
            us = [1e6 * s for s in seconds]
            print(f"{name:<12} {rows:>5} {min(us):>12.1f} {statistics.median(us):>8.1f} {max(us):>8.1f}")
            if parts is not None:
                split.append((name, rows, part_split(seconds, parts)))
    if split:
        print(f"\n{'engine':<12} {'rows':>5}" + "".join(f" {p:>8}" for p in SPLIT) + "  (us a step, median over blocks)")
        for name, rows, columns in split:
            print(f"{name:<12} {rows:>5}" + "".join(f" {columns[p]:>8.1f}" for p in SPLIT))


if __name__ == "__main__":
    main()
