"""Figure 19a on the sim: what swapping a sequence's KV costs against block size, beside recomputing it.

    python -m pagedbench.studies.swap_cost [--model opt-13b] [--hardware a100-40gb] [--tokens 1024]

The table is `pagedbench.engines.sim.swap_cost.swap_costs`: swap out and swap in each
move `tokens` token slots across the host link as the sim's transfer model
charges them (`engines/sim/transfer.py`: one transfer per block, layer, K and
V, each a fixed cost plus its bytes over the link); recomputation is the
prefill of the same tokens by the cost model. The transfers' time is shown
alone: in a served iteration the GPU presets overlap it with the forward
pass (`host_transfer_overlap`), which this table does not show. The GPU
presets' fixed cost per transfer, 10 us, is an assumption (launch and DMA
set-up of a small cudaMemcpyAsync), not a measurement; the real device's
counterpart, which measures it, is the swap benchmark
(`python -m pagedbench.studies.swap_bench --out DIR`).
"""
from __future__ import annotations

import argparse
import sys

import pandas as pd

from pagedbench.engines.sim.swap_cost import swap_costs
from pagedbench.engines.specs.presets import load_hardware, load_model


def swap_cost_table(model: str = "opt-13b", hardware: str = "a100-40gb", tokens: int = 1024) -> pd.DataFrame:
    return pd.DataFrame(swap_costs(load_model(model), load_hardware(hardware), tokens))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.studies.swap_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="opt-13b")
    parser.add_argument("--hardware", default="a100-40gb")
    parser.add_argument("--tokens", type=int, default=1024)
    args = parser.parse_args(argv)
    if args.tokens < 1:
        parser.error("--tokens must be >= 1")
    try:
        table = swap_cost_table(args.model, args.hardware, args.tokens)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    hw = load_hardware(args.hardware)
    print(f"{args.model} on {args.hardware}: moving {args.tokens} tokens' KV one way vs recomputing them")
    served = "overlap the forward pass layer by layer" if hw.host_transfer_overlap else "run before the forward pass"
    print(f"per transfer {1e6 * hw.host_transfer_latency_s:.3g} us + bytes at {hw.host_link_bandwidth / 1e9:.3g} "
          f"GB/s (conf/hardware/{args.hardware}.yaml says where each comes from); in a served iteration the "
          f"swaps {served}")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
