"""The CPU backend's two largest costs, each against its alternatives, on the tiny model's shapes, one thread.

    python scripts/cpu_backend_bench.py gemm        # F.linear against oneDNN with the weight packed once
    python scripts/cpu_backend_bench.py attention   # paged decode: the per-sequence loop against batched forms

`gemm`: the tiny model's linears (the LM head 50,272 x 256, q/k/v/out 256 x 256, fc1 1,024 x 256, fc2 256 x
1,024) at 1 to 64 rows: `F.linear`, and `PackedLinear` (engines/real/cpu_gemm.py), which the backend runs.
`attention`: one layer's paged decode over block tables of random blocks (block 16, 4 heads of 64), context
lengths drawn from 20 to 700: the reference loop (kernels/reference.py, what the backend runs), one gather of
every row's blocks then the loop, and a padded batch with one masked matmul. Each form is checked equal to the
reference first. Printed: min and median milliseconds of `--repeat` calls after three warm-up calls.
"""
from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from pagedbench.engines.real.cpu_gemm import PackedLinear, onednn_available
from pagedbench.kernels import reference

SHAPES = {"lm_head": (50272, 256), "q/k/v/out": (256, 256), "fc1": (1024, 256), "fc2": (256, 1024)}
ROWS = (1, 8, 23, 64)


def timed(fn, repeat: int) -> tuple[float, float]:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * min(times), 1e3 * statistics.median(times)


def gemm(repeat: int) -> None:
    if not onednn_available(torch.float32):
        raise SystemExit("this torch has no oneDNN linear: nothing to compare")
    print(f"{'layer':<10} {'rows':>4} {'F.linear ms':>12} {'(median)':>9} {'packed ms':>10} {'(median)':>9} "
          f"{'speed-up':>8}")
    for name, (out_features, in_features) in SHAPES.items():
        linear = torch.nn.Linear(in_features, out_features)
        packed = PackedLinear(linear)
        for rows in ROWS:
            x = torch.randn(1, rows, in_features)
            torch.testing.assert_close(packed(x), linear(x), atol=1e-4, rtol=1e-4)
            with torch.inference_mode():
                base, base_med = timed(lambda: linear(x), repeat)
                ours, ours_med = timed(lambda: packed(x), repeat)
            print(f"{name:<10} {rows:>4} {base:>12.3f} {base_med:>9.3f} {ours:>10.3f} {ours_med:>9.3f} "
                  f"{base / ours:>7.2f}x")


def one_gather(query, k_cache, v_cache, block_tables, context_lens, scale):
    """Every row's blocks gathered at once into one buffer, then each row's attention on its slice."""
    bs, kv_heads, head_dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    lengths = context_lens.tolist()
    counts = [-(-n // bs) for n in lengths]
    blocks = torch.cat([block_tables[s, :c] for s, c in enumerate(counts)]).long()
    k_all = torch.index_select(k_cache, 0, blocks).flatten(0, 1)
    v_all = torch.index_select(v_cache, 0, blocks).flatten(0, 1)
    out = torch.empty_like(query)
    start = 0
    for s, n in enumerate(lengths):
        k, v = k_all[start:start + n], v_all[start:start + n]
        q = query[s].view(kv_heads, -1, head_dim)
        probs = torch.softmax(torch.matmul(q, k.transpose(0, 1).transpose(1, 2)) * scale, dim=-1)
        out[s] = torch.matmul(probs, v.transpose(0, 1)).reshape(-1, head_dim)
        start += counts[s] * bs
    return out


def padded(query, k_cache, v_cache, block_tables, context_lens, scale):
    """One gather of every row's table padded to the longest, one masked matmul over the batch."""
    rows, heads, head_dim = query.shape
    bs, kv_heads = k_cache.shape[1], k_cache.shape[2]
    longest = int(context_lens.max())
    width = -(-longest // bs)
    tables = block_tables[:, :width].long()
    k = k_cache[tables].view(rows, width * bs, kv_heads, head_dim)
    v = v_cache[tables].view(rows, width * bs, kv_heads, head_dim)
    q = query.view(rows, kv_heads, heads // kv_heads, head_dim)
    scores = torch.matmul(q, k.permute(0, 2, 3, 1)) * scale                    # [rows, Hkv, G, L]
    beyond = torch.arange(width * bs)[None, :] >= context_lens.long()[:, None]
    probs = torch.softmax(scores.masked_fill(beyond[:, None, None, :], float("-inf")), dim=-1)
    return torch.matmul(probs, v.transpose(1, 2)).reshape(rows, heads, head_dim)


def attention(repeat: int) -> None:
    rng = random.Random(0)
    bs, heads, head_dim, num_blocks = 16, 4, 64, 512
    k_cache = torch.randn(num_blocks, bs, heads, head_dim)
    v_cache = torch.randn_like(k_cache)
    forms = {"loop (ours)": reference.paged_decode_attention, "one gather + loop": one_gather, "padded batch": padded}
    print(f"{'form':<18} {'rows':>4} {'ms':>8} {'(median)':>9} {'/ loop':>7}")
    for rows in ROWS:
        lengths = [rng.randint(20, 700) for _ in range(rows)]
        width = -(-max(lengths) // bs)
        tables = torch.tensor([[rng.randrange(num_blocks) for _ in range(width)] for _ in range(rows)],
                              dtype=torch.int32)
        lens = torch.tensor(lengths, dtype=torch.int32)
        query = torch.randn(rows, heads, head_dim)
        expected = reference.paged_decode_attention(query, k_cache, v_cache, tables, lens, 0.125)
        loop = None
        for name, form in forms.items():
            torch.testing.assert_close(form(query, k_cache, v_cache, tables, lens, 0.125), expected,
                                       atol=1e-5, rtol=1e-5)
            best, median = timed(lambda: form(query, k_cache, v_cache, tables, lens, 0.125), repeat)
            loop = loop or best
            print(f"{name:<18} {rows:>4} {best:>8.3f} {median:>9.3f} {best / loop:>6.2f}x")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["gemm", "attention"])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.threads < 1:
        parser.error("--repeat and --threads must be >= 1")
    torch.set_num_threads(args.threads)
    gemm(args.repeat) if args.what == "gemm" else attention(args.repeat)


if __name__ == "__main__":
    main()
