"""pytest-benchmark timing of swap-out / swap-in against block size, beside recomputation (Figure 19a).

    make bench PYTEST_ARGS="-k swap -s"

The measurement lives in `studies/swap_bench.py`, whose command writes it to CSV and JSON.
"""
from __future__ import annotations

from studies.swap_bench import BLOCK_SIZES, measure


def test_swap_latency_against_block_size(benchmark):
    rows, meta = benchmark.pedantic(measure, kwargs=dict(tokens=512, repeats=3), rounds=1, iterations=1)
    benchmark.extra_info.update(meta)
    print(f"\nswap of {rows[0]['tokens']} tokens on {meta['device']} ({meta['model']}):")
    for r in rows[:len(BLOCK_SIZES)]:
        print(f"  block {r['block_size']:>3}: out {r['swap_out_ms']:8.2f} ms, in {r['swap_in_ms']:8.2f} ms, "
              f"recompute {r['recompute_ms']:8.2f} ms")
    print(f"  fit: {meta['fit_host_transfer_latency_s'] * 1e6:.2f} us per transfer, "
          f"{(meta['fit_host_link_bandwidth'] or float('nan')) / 1e9:.1f} GB/s")
    assert len(rows) == len(BLOCK_SIZES) + 2 and all(r["swap_out_ms"] > 0 and r["swap_in_ms"] > 0 for r in rows)
