"""Figure 19a on the sim: what swapping a sequence's KV costs against block size, beside recomputing it.

    python -m studies.swap_cost [--model opt-13b] [--hardware a100-40gb] [--tokens 1024]

The table is `engines.sim.swap_cost.swap_costs`: swap out and swap in each
move `tokens` token slots across the host link as the sim's transfer model
charges them; recomputation is the prefill of the same tokens by the cost
model. The real device's counterpart is the swap benchmark
(`python -m studies.swap_bench --out DIR`).
"""
from __future__ import annotations

import argparse
import sys

import pandas as pd

from engines.sim.swap_cost import swap_costs
from engines.specs.presets import load_hardware, load_model


def swap_cost_table(model: str = "opt-13b", hardware: str = "a100-40gb", tokens: int = 1024) -> pd.DataFrame:
    return pd.DataFrame(swap_costs(load_model(model), load_hardware(hardware), tokens))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.swap_cost", description=__doc__.splitlines()[0])
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
    print(f"{args.model} on {args.hardware}: moving {args.tokens} tokens' KV one way vs recomputing them")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
