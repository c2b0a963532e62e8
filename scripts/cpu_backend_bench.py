"""The CPU backend's two largest costs, each against its alternatives, on the tiny model's shapes, one thread.

    python scripts/cpu_backend_bench.py gemm        # F.linear against oneDNN with the weight packed once
    python scripts/cpu_backend_bench.py attention   # paged decode: the per-sequence loop against batched forms
    python scripts/cpu_backend_bench.py attention --compiled   # and one padded form compiled by torch.compile
    python scripts/cpu_backend_bench.py prefill     # causal prefill: fused SDPA, the whole square, tiles
    python scripts/cpu_backend_bench.py argmax      # a greedy step's argmax: torch's against numpy's (the executor's)

`gemm`: the tiny model's linears (the LM head 50,272 x 256, q/k/v/out 256 x 256, fc1 1,024 x 256, fc2 256 x
1,024) at 1 to 64 rows: `F.linear`, and `PackedLinear` (engines/real/cpu_gemm.py), which the backend runs.
`attention`: one layer's paged decode over block tables of random blocks (block 16, 4 heads of 64), context
lengths drawn from 20 to 700: the reference loop (kernels/reference.py), the native kernel that reads each
row's blocks in place (kernels/cpu_native.py, what the backend runs where it builds), one gather of
every row's blocks then the loop, a padded batch with one masked matmul, the loop with torch's fused SDPA per
row, every row's blocks scored at once (one batched matmul over blocks, a segment softmax by scatter), and with
--compiled a padded gather-and-attend compiled by torch.compile (inductor's C++ on a CPU; compiled once, before
the timing, ~20 s). `prefill`: one layer's causal prefill (4 heads of 64, and GQA's 8 query heads over 2) of
packed sequences of 8 x 30, 4 x 262 (the ShareGPT trace's mean prompt), 600 + 300 + 100, 1,000 tokens, and 12
prompts of the trace's spread: the reference (torch's fused SDPA per sequence), the native set's form before it
was tiled (one masked `baddbmm` over the whole square, a softmax and a product per sequence) and the native
set's (kernels/cpu_native.py: query tiles scored against the keys up to each tile's end). `argmax`: the greedy
token of each row of [rows, 50,272] fp32 logits at 1, 32 and 128 rows, by torch's
`argmax` and by the executor's `greedy` (numpy's argmax on a CPU). Each form is checked equal to the reference
first. Printed: min and median milliseconds of `--repeat` calls after three warm-up calls.
"""
from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from pagedbench.engines.real.cpu_gemm import PackedLinear, onednn_available
from pagedbench.engines.real.executor import greedy
from pagedbench.kernels import cpu_native, reference

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


def sdpa_rows(query, k_cache, v_cache, block_tables, context_lens, scale):
    """The loop with torch's fused attention (SDPA) on each row's gathered blocks."""
    bs, heads = k_cache.shape[1], query.shape[1]
    out = torch.empty_like(query)
    tables = block_tables.long()
    for s, length in enumerate(context_lens.tolist()):
        blocks = tables[s, :-(-length // bs)]
        k = torch.index_select(k_cache, 0, blocks).flatten(0, 1)[:length].transpose(0, 1)   # [H, L, D]
        v = torch.index_select(v_cache, 0, blocks).flatten(0, 1)[:length].transpose(0, 1)
        out[s] = torch.nn.functional.scaled_dot_product_attention(query[s].view(heads, 1, -1), k, v,
                                                                  scale=scale).view(heads, -1)
    return out


def by_blocks(query, k_cache, v_cache, block_tables, context_lens, scale):
    """Every row's blocks scored in one batched matmul, a softmax across each row's blocks by scatter, no loop."""
    rows, heads, head_dim = query.shape
    bs, kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = heads // kv_heads
    lengths = context_lens.long()
    counts = (lengths + bs - 1) // bs
    seg = torch.repeat_interleave(torch.arange(rows), counts)                    # the row of each block read
    first = torch.cumsum(counts, 0) - counts
    within = torch.arange(len(seg)) - first[seg]                                  # its index within the row
    blocks = block_tables.long()[seg, within]
    valid = within[:, None] * bs + torch.arange(bs)[None, :] < lengths[seg][:, None]   # [blocks, bs]
    kb, vb = k_cache.index_select(0, blocks), v_cache.index_select(0, blocks)     # [blocks, bs, Hkv, D]
    q = query.index_select(0, seg).view(-1, kv_heads, group, head_dim)
    scores = torch.matmul(q, kb.permute(0, 2, 3, 1)).mul_(scale)                  # [blocks, Hkv, G, bs]
    scores.masked_fill_(~valid[:, None, None, :], float("-inf"))
    peak = torch.full((rows, kv_heads, group), float("-inf")).scatter_reduce_(
        0, seg[:, None, None].expand(-1, kv_heads, group), scores.amax(-1), "amax")
    weights = torch.exp(scores - peak.index_select(0, seg)[..., None])
    total = torch.zeros(rows, kv_heads, group).index_add_(0, seg, weights.sum(-1))
    out = torch.zeros(rows, kv_heads, group, head_dim).index_add_(0, seg, torch.matmul(weights, vb.permute(0, 2, 1, 3)))
    return (out / total[..., None]).view(rows, heads, head_dim)


def padded_flat(query, k_cache, v_cache, block_tables, context_lens, scale, longest: int):
    """A padded gather and one masked attention, written for torch.compile (every row to `longest` positions)."""
    bs = k_cache.shape[1]
    pos = torch.arange(longest)
    blocks = block_tables.long()[:, pos // bs]                                    # [rows, L]
    k, v = k_cache[blocks, pos % bs], v_cache[blocks, pos % bs]                   # [rows, L, Hkv, D]
    scores = torch.einsum("bhd,blhd->bhl", query, k) * scale
    scores = scores.masked_fill(pos[None, None, :] >= context_lens[:, None, None], float("-inf"))
    return torch.einsum("bhl,blhd->bhd", torch.softmax(scores, -1), v)


def attention(repeat: int, compiled: bool = False) -> None:
    rng = random.Random(0)
    bs, heads, head_dim, num_blocks = 16, 4, 64, 512
    k_cache = torch.randn(num_blocks, bs, heads, head_dim)
    v_cache = torch.randn_like(k_cache)
    forms = {"loop (reference)": reference.paged_decode_attention}
    if cpu_native.available()[0]:
        forms["native, in place"] = cpu_native.paged_decode_attention
    forms.update({"one gather + loop": one_gather, "padded batch": padded, "SDPA per row": sdpa_rows,
                  "scored by blocks": by_blocks})
    if compiled:
        fused = torch.compile(padded_flat, dynamic=True)
        forms["compiled, padded"] = lambda q, k, v, t, lens, scale: fused(q, k, v, t, lens, scale, int(lens.max()))
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


def whole_square(query, key, value, cu_seqlens, scale, max_seqlen=None):
    """The native set's prefill before it was tiled: per sequence, every query row scored against every key as
    one batched product with the causal mask added (`baddbmm`, the masked half computed too), a softmax and
    one product with V."""
    out = torch.empty_like(query)
    num_heads, num_kv_heads, head_dim = query.shape[1], key.shape[1], query.shape[2]
    group = num_heads // num_kv_heads
    bounds = cu_seqlens.tolist()
    for start, end in zip(bounds[:-1], bounds[1:]):
        n = end - start
        mask = torch.full((n, n), float("-inf")).triu_(1)
        q = query[start:end].view(n, num_kv_heads, group, head_dim).permute(1, 2, 0, 3)
        q = q.reshape(num_kv_heads, group * n, head_dim)
        k = key[start:end].transpose(0, 1)
        v = value[start:end].transpose(0, 1)
        bias = mask.repeat(group, 1) if group > 1 else mask
        scores = torch.baddbmm(bias.expand(num_kv_heads, -1, -1), q, k.transpose(1, 2), alpha=scale)
        o = torch.matmul(torch.softmax(scores, dim=-1), v)
        out[start:end] = o.view(num_kv_heads, group, n, head_dim).permute(2, 0, 1, 3).reshape(n, num_heads, head_dim)
    return out


PREFILL_LENGTHS = ([30] * 8, [262] * 4, [600, 300, 100], [1000],
                   [898, 560, 37, 201, 150, 80, 500, 40, 37, 120, 300, 60])   # 12 prompts of the trace's spread


def prefill(repeat: int) -> None:
    forms = {"SDPA (reference)": reference.prefill_attention, "whole square (before)": whole_square,
             "tiled (native set)": cpu_native.prefill_attention}
    print(f"{'form':<22} {'heads':>5} {'tokens':>16} {'ms':>8} {'(median)':>9} {'/ SDPA':>7}")
    for heads, kv_heads in ((4, 4), (8, 2)):
        for lens in PREFILL_LENGTHS:
            cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
            q = torch.randn(sum(lens), heads, 64)
            k, v = (torch.randn(sum(lens), kv_heads, 64) for _ in range(2))
            expected = reference.prefill_attention(q, k, v, cu, 0.125)
            first = None
            for name, form in forms.items():
                torch.testing.assert_close(form(q, k, v, cu, 0.125), expected, atol=1e-5, rtol=1e-5)
                best, median = timed(lambda: form(q, k, v, cu, 0.125), repeat)
                first = first or best
                shown = f"{len(lens)} x {lens[0]}" if len(set(lens)) == 1 else "+".join(map(str, lens))
                shown = shown if len(shown) <= 16 else f"{len(lens)} mixed, {sum(lens)}"
                print(f"{name:<22} {heads}/{kv_heads:<3} {shown:>16} {best:>8.3f} {median:>9.3f} {best / first:>6.2f}x")


def argmax(repeat: int) -> None:
    vocab = SHAPES["lm_head"][0]
    print(f"{'rows':>4} {'torch ms':>9} {'(median)':>9} {'numpy ms':>9} {'(median)':>9} {'speed-up':>8}")
    with torch.inference_mode():
        for rows in (1, 32, 128):
            logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(rows))
            assert greedy(logits) == logits.argmax(dim=-1).tolist()
            base, base_med = timed(lambda: logits.argmax(dim=-1).tolist(), repeat)
            ours, ours_med = timed(lambda: greedy(logits), repeat)
            print(f"{rows:>4} {base:>9.3f} {base_med:>9.3f} {ours:>9.3f} {ours_med:>9.3f} {base / ours:>7.2f}x")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["gemm", "attention", "prefill", "argmax"])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--compiled", action="store_true", help="attention: also a padded form by torch.compile")
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.threads < 1:
        parser.error("--repeat and --threads must be >= 1")
    torch.set_num_threads(args.threads)
    if args.what == "gemm":
        gemm(args.repeat)
    elif args.what == "prefill":
        prefill(args.repeat)
    elif args.what == "argmax":
        argmax(args.repeat)
    else:
        attention(args.repeat, args.compiled)


if __name__ == "__main__":
    main()
