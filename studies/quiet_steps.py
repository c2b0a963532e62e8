"""How much of a run the sim's fast-forward can skip: its quiet decode steps and the stretches they form.

    python -m pagedbench.studies.quiet_steps RUN_DIR [RUN_DIR ...]

A step is quiet when it is a decode step that preempts, copies and swaps nothing, no request finishes in it
and no request arrives before it (since the step before): the steps `Engine.fast_forward` runs without a
batch once a quiet step has run. For each run folder: its steps, the share that is quiet, and the quiet
stretches (count, mean and 90th-percentile length). The stretches bound what the fast path saves: the step
that opens each stretch, and every event step, still runs in full.
"""
from __future__ import annotations

import argparse
from pathlib import Path
import sys

import numpy as np
import pandas as pd


def quiet_mask(iterations: pd.DataFrame, requests: pd.DataFrame) -> np.ndarray:
    """Per step: decode only, nothing moved or preempted, no finish in it, no arrival released before it."""
    start = iterations["start_s"].to_numpy()
    end = start + iterations["duration_s"].to_numpy()
    moved = iterations[["preempted", "swapped_in", "swapped_out", "copy_tokens"]].to_numpy().any(axis=1)
    quiet = (iterations["prefill_seqs"].to_numpy() == 0) & ~moved
    finishes = np.searchsorted(end, requests["finish_s"].dropna().to_numpy())
    arrivals = np.searchsorted(start, requests["arrival_s"].to_numpy(), side="left")
    for index in (finishes, arrivals):
        quiet[index[index < len(quiet)]] = False
    return quiet


def stretches(quiet: np.ndarray) -> np.ndarray:
    """Lengths of the runs of consecutive quiet steps."""
    padded = np.concatenate([[False], quiet, [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return edges[1::2] - edges[::2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.studies.quiet_steps", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (iterations.parquet, requests.parquet)")
    args = parser.parse_args(argv)
    print(f"{'run':<40} {'steps':>8} {'quiet':>6} {'stretches':>9} {'mean':>6} {'p90':>6}")
    for run in args.runs:
        try:
            iterations = pd.read_parquet(run / "iterations.parquet")
            requests = pd.read_parquet(run / "requests.parquet")
        except (OSError, ValueError) as err:
            parser.error(f"{run}: not a run folder with both tables ({err})")
        quiet = quiet_mask(iterations, requests)
        runs = stretches(quiet)
        mean, p90 = (runs.mean(), np.percentile(runs, 90)) if len(runs) else (0.0, 0.0)
        print(f"{str(run)[-40:]:<40} {len(quiet):>8,} {quiet.mean() if len(quiet) else 0:>6.0%} {len(runs):>9,} "
              f"{mean:>6.1f} {p90:>6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
