"""pytest-benchmark timings of swap-out / swap-in against block size, beside recomputation (Figure 19a).

    make bench PYTEST_ARGS="-k swap"

TOKENS token slots of the tiny model's K and V (every layer) move from the
device cache to the host pool (swap out) or back (swap in), one copy per
block, per layer, for K and for V, as the engine swaps them
(`pagedbench.engines.real.swap`); on cuda the host pool is pinned and each timed call
ends with a synchronise. Recomputation is the prefill of the same tokens
through the real model; its cost does not depend on the block size. Each swap
must leave the destination's blocks equal to the source's, and each prefill
must emit one token.

`python -m pagedbench.studies.swap_bench --out DIR` measures the same rows with its own
timer, at more token counts, and fits the sim's transfer model to them.
"""
from __future__ import annotations

import pytest
import torch

from pagedbench.engines.real.build import RealBackendConfig, load_real_model
from pagedbench.engines.real.model import resolve_device, resolve_dtype
from pagedbench.engines.real.swap import allocate_host_blocks, swap_blocks
from pagedbench.engines.specs.presets import load_model
from pagedbench.studies.swap_bench import BLOCK_SIZES, recompute_setup

MODEL, TOKENS = "tiny", 512
ROUNDS, WARMUP_ROUNDS = 20, 2     # a swap: 1-20 ms on a cpu
RECOMPUTE_ROUNDS, RECOMPUTE_WARMUP_ROUNDS = 10, 2
DEVICE = resolve_device("auto")
DTYPE = resolve_dtype("auto", DEVICE)
GROUP = f"swap or recompute {TOKENS} tokens, {MODEL} model, {DEVICE.type}"


def _sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


@pytest.mark.parametrize("direction", ["out", "in"])
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
def test_swap(benchmark, block_size, direction):
    spec = load_model(MODEL)
    blocks = -(-TOKENS // block_size)
    shape = (blocks, block_size, spec.num_kv_heads, spec.head_dim)   # one layer's K (or V) blocks
    dev_k = [torch.empty(shape, device=DEVICE, dtype=DTYPE) for _ in range(spec.num_layers)]
    dev_v = [torch.empty_like(t) for t in dev_k]
    device, host = (dev_k, dev_v), allocate_host_blocks(dev_k, blocks)
    (src_k, src_v), (dst_k, dst_v) = (device, host) if direction == "out" else (host, device)
    for t in src_k + src_v:
        t.copy_(torch.randn(shape))
    for t in dst_k + dst_v:
        t.zero_()
    pairs = [(b, b) for b in range(blocks)]
    benchmark.group = GROUP

    def swap():
        swap_blocks(src_k, src_v, dst_k, dst_v, pairs)
        _sync()

    benchmark.pedantic(swap, rounds=ROUNDS, warmup_rounds=WARMUP_ROUNDS, iterations=1)
    benchmark.extra_info.update(blocks=blocks, transfers=2 * spec.num_layers * blocks, dtype=str(DTYPE))
    pairs_of_layers = zip([t.cpu() for t in src_k + src_v], [t.cpu() for t in dst_k + dst_v])
    moved = sum(torch.equal(s[b], d[b]) for s, d in pairs_of_layers for b in range(blocks))
    assert moved == 2 * spec.num_layers * blocks   # every block of every layer's K and V


def test_recompute(benchmark):
    """One prefill of TOKENS tokens through the real model, with room in its KV cache for them."""
    spec = load_model(MODEL)
    backend = RealBackendConfig(device=str(DEVICE), dtype=str(DTYPE).removeprefix("torch."))
    loaded = load_real_model(backend, spec)
    setup, seq, batch = recompute_setup(backend, spec, loaded, TOKENS)
    benchmark.group = GROUP

    def recompute() -> int:
        setup.executor.execute(batch)
        emitted = len(seq.output_token_ids)
        seq.output_token_ids.clear()
        return emitted

    assert benchmark.pedantic(recompute, rounds=RECOMPUTE_ROUNDS, warmup_rounds=RECOMPUTE_WARMUP_ROUNDS,
                              iterations=1) == 1
